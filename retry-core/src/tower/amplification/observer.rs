//! [`AmplificationObserver`]: counts each logical operation's arrivals and says when one came
//! more often than any single retrying layer sends it.

use std::collections::HashMap;
use std::fmt;
use std::hash::RandomState;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use ::http::{HeaderMap, Method};
use tokio::time::Instant;

use super::request::{Identity, describe_source, source_hash};
use super::table::{Arrival, Entry, Table};
use crate::http::Announcement;

/// How long an operation is counted from its first arrival, unless
/// [`window`](AmplificationObserverBuilder::window) says otherwise: 30 s, longer than the
/// whole retry schedule of a typical client (4 attempts, 1 s base, doubling).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(30);

/// Operations tracked at once unless [`capacity`](AmplificationObserverBuilder::capacity) says
/// otherwise (about 1.3 MB: at most 150 bytes an operation).
pub const DEFAULT_CAPACITY: usize = 10_000;

/// Arrivals of one operation allowed when none of them announced a `max`, unless
/// [`unannounced_limit`](AmplificationObserverBuilder::unannounced_limit) says otherwise: 5,
/// gRPC's ceiling on one client's attempts (larger `maxAttempts` are taken as 5), so more
/// arrivals than that cannot be one conforming client's retries.
pub const DEFAULT_UNANNOUNCED_LIMIT: u32 = 5;

/// Distinct route labels kept unless [`max_routes`](AmplificationObserverBuilder::max_routes)
/// says otherwise; the routes seen after them are labelled `other`.
pub const DEFAULT_MAX_ROUTES: usize = 100;

/// The route label of requests past [`DEFAULT_MAX_ROUTES`] distinct ones.
const OTHER_ROUTE: &str = "other";

/// At most one WARN per route in this long; the others are DEBUG (and all are counted).
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Counts the arrivals of each logical operation at a service, to see retries that layers
/// other than this library's multiply (a gateway's, a mesh's, a plain HTTP client's loop):
/// the measurement behind the `Caller-Retries` rule, taken where the requests land.
///
/// Put it in front of a service with [`AmplificationLayer`](super::AmplificationLayer), or in
/// an [`IdempotencyLayer`](crate::tower::IdempotencyLayer) with
/// [`observe`](crate::tower::IdempotencyLayer::observe). It is a handle: clones share the
/// counts, so a test or an admin endpoint can read [`operations`](Self::operations) and
/// [`stats`](Self::stats). See the [module docs](super) for what it counts and why.
///
/// ```
/// use std::time::Duration;
/// use retry_core::tower::AmplificationObserver;
///
/// let observer = AmplificationObserver::builder()
///     .window(Duration::from_secs(60))
///     .capacity(50_000)
///     .unannounced_limit(8)
///     .build();
/// assert!(observer.operations().is_empty());
/// assert!(observer.footprint_bytes() < 8 << 20);
/// ```
#[derive(Clone)]
pub struct AmplificationObserver {
    inner: Arc<Inner>,
}

struct Inner {
    table: Table,
    hasher: RandomState,
    unannounced_limit: u32,
    routes: Routes,
    /// When each route last had a WARN.
    warned: Mutex<Vec<Option<Instant>>>,
    stats: Counters,
}

#[derive(Default)]
struct Counters {
    arrivals: AtomicU64,
    announced_retries: AtomicU64,
    operations: AtomicU64,
    amplified: AtomicU64,
    warnings: AtomicU64,
}

/// Settings of an [`AmplificationObserver`]; made by [`AmplificationObserver::builder`].
///
/// ```
/// use retry_core::tower::AmplificationObserver;
///
/// let observer = AmplificationObserver::builder().capacity(1_000).build();
/// assert!(observer.capacity() >= 1_000);
/// ```
#[derive(Debug, Clone)]
#[must_use = "call `.build()` to make the observer"]
pub struct AmplificationObserverBuilder {
    window: Duration,
    capacity: usize,
    unannounced_limit: u32,
    max_routes: usize,
}

impl AmplificationObserverBuilder {
    /// How long an operation is counted from its first arrival (default [`DEFAULT_WINDOW`]):
    /// longer than the whole retry schedule upstream, or a slow storm is counted as several
    /// operations. An arrival after it opens a new window.
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = retry_core::tower::AmplificationObserver::builder().window(Duration::from_secs(120));
    /// # drop(builder);
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Operations tracked at once (default [`DEFAULT_CAPACITY`], rounded up to a multiple of
    /// 16, the table's shards). The table is allocated once, at most 150 bytes an operation,
    /// and never grows: when it is full, the operation that arrived first is closed to make
    /// room, as if its window had ended.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::builder().capacity(2_000).build();
    /// assert_eq!(observer.capacity(), 2_000);
    /// ```
    pub fn capacity(mut self, operations: usize) -> Self {
        self.capacity = operations;
        self
    }

    /// Arrivals of one operation allowed when none announced a `max` (default
    /// [`DEFAULT_UNANNOUNCED_LIMIT`]): the retries of a client that is not ours, as many as
    /// one such layer may send.
    ///
    /// ```
    /// let builder = retry_core::tower::AmplificationObserver::builder().unannounced_limit(4);
    /// # drop(builder);
    /// ```
    pub fn unannounced_limit(mut self, arrivals: u32) -> Self {
        self.unannounced_limit = arrivals;
        self
    }

    /// Distinct route labels kept (default [`DEFAULT_MAX_ROUTES`]); later ones are `other`, so
    /// paths with ids in them cannot grow the metrics without bound.
    ///
    /// ```
    /// let builder = retry_core::tower::AmplificationObserver::builder().max_routes(20);
    /// # drop(builder);
    /// ```
    pub fn max_routes(mut self, routes: usize) -> Self {
        self.max_routes = routes;
        self
    }

    /// The observer, its table allocated now.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::builder().build();
    /// # drop(observer);
    /// ```
    pub fn build(self) -> AmplificationObserver {
        let max_routes = self.max_routes.clamp(1, usize::from(u16::MAX));
        AmplificationObserver {
            inner: Arc::new(Inner {
                table: Table::new(self.capacity, self.window),
                hasher: RandomState::new(),
                unannounced_limit: self.unannounced_limit,
                routes: Routes::new(max_routes),
                warned: Mutex::new(vec![None; max_routes + 1]),
                stats: Counters::default(),
            }),
        }
    }
}

impl Default for AmplificationObserver {
    fn default() -> Self {
        AmplificationObserver::new()
    }
}

impl fmt::Debug for AmplificationObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmplificationObserver")
            .field("capacity", &self.capacity())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What an observer has counted since it was built; see [`AmplificationObserver::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AmplificationStats {
    /// Requests seen.
    pub arrivals: u64,
    /// Requests that announced an attempt after the first (`Caller-Retries: ?1;attempt=2..`).
    pub announced_retries: u64,
    /// Logical operations opened (requests with a key or a trace id, once per window).
    pub operations: u64,
    /// Operations that arrived more often than allowed.
    pub amplified: u64,
    /// WARN events written about them (at most one per route a minute).
    pub warnings: u64,
}

/// How arrivals were grouped into an [`Operation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupedBy {
    /// The `Idempotency-Key` (and the client's scope, under an `IdempotencyLayer`).
    IdempotencyKey,
    /// The trace id of a W3C `traceparent`.
    TraceId,
}

/// One logical operation being counted; see [`AmplificationObserver::operations`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Operation {
    /// Its route label.
    pub route: String,
    /// How its arrivals were told to be one operation.
    pub grouped_by: GroupedBy,
    /// Requests of it within its window.
    pub arrivals: u32,
    /// The largest attempt number its requests announced, if any did.
    pub largest_attempt: Option<u32>,
    /// The largest `max` its requests announced, if any did.
    pub largest_max: Option<u32>,
    /// Distinct sources it came from, as far as `Via`, `X-Forwarded-For`, `Forwarded` and
    /// `User-Agent` tell them apart (at most 4).
    pub sources: usize,
    /// From its first arrival to its last.
    pub spread: Duration,
    /// It arrived more often than allowed.
    pub amplified: bool,
}

impl AmplificationObserver {
    /// An observer with the default settings.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::new();
    /// assert_eq!(observer.capacity(), retry_core::tower::DEFAULT_CAPACITY);
    /// ```
    pub fn new() -> Self {
        AmplificationObserver::builder().build()
    }

    /// Settings other than the defaults.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::builder().unannounced_limit(3).build();
    /// # drop(observer);
    /// ```
    pub fn builder() -> AmplificationObserverBuilder {
        AmplificationObserverBuilder {
            window: DEFAULT_WINDOW,
            capacity: DEFAULT_CAPACITY,
            unannounced_limit: DEFAULT_UNANNOUNCED_LIMIT,
            max_routes: DEFAULT_MAX_ROUTES,
        }
    }

    /// Operations it can track at once.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::builder().capacity(100).build();
    /// assert_eq!(observer.capacity(), 112, "rounded up to 16 shards of 7");
    /// ```
    pub fn capacity(&self) -> usize {
        self.inner.table.capacity()
    }

    /// Bytes its table holds: allocated when it was built, and the same however many
    /// operations come and go.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::new();
    /// assert!(observer.footprint_bytes() <= 150 * observer.capacity());
    /// ```
    pub fn footprint_bytes(&self) -> usize {
        self.inner.table.footprint()
    }

    /// What it has counted so far.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::new();
    /// assert_eq!(observer.stats().arrivals, 0);
    /// ```
    pub fn stats(&self) -> AmplificationStats {
        let s = &self.inner.stats;
        AmplificationStats {
            arrivals: s.arrivals.load(Ordering::Relaxed),
            announced_retries: s.announced_retries.load(Ordering::Relaxed),
            operations: s.operations.load(Ordering::Relaxed),
            amplified: s.amplified.load(Ordering::Relaxed),
            warnings: s.warnings.load(Ordering::Relaxed),
        }
    }

    /// The operations within their window now (those whose window has ended are closed
    /// first), for a test or an admin page.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::new();
    /// assert!(observer.operations().is_empty());
    /// ```
    pub fn operations(&self) -> Vec<Operation> {
        self.inner
            .table
            .close_expired(Instant::now(), &mut |e| self.closed(e));
        self.inner
            .table
            .entries()
            .iter()
            .map(|e| Operation {
                route: self.inner.routes.name(e.route).to_string(),
                grouped_by: if e.keyed {
                    GroupedBy::IdempotencyKey
                } else {
                    GroupedBy::TraceId
                },
                arrivals: e.arrivals,
                largest_attempt: (e.largest_attempt > 0).then_some(e.largest_attempt),
                largest_max: (e.largest_max > 0).then_some(e.largest_max),
                sources: e.source_count(),
                spread: e.last.saturating_duration_since(e.opened),
                amplified: e.amplified,
            })
            .collect()
    }

    /// Closes every operation now, as if its window had ended: each one's arrivals go into the
    /// `retry_core_operation_arrivals` histogram. For a service shutting down, or a test that
    /// reads the histogram.
    ///
    /// ```
    /// let observer = retry_core::tower::AmplificationObserver::new();
    /// observer.flush();
    /// assert!(observer.operations().is_empty());
    /// ```
    pub fn flush(&self) {
        self.inner.table.close_all(&mut |e| self.closed(e));
    }

    /// Counts one request of `route`: grouped by `identity` when it has one, and in any case
    /// by what its `Caller-Retries` announces. Never fails and never waits on anything but a
    /// shard's lock, held for a few map operations.
    pub(crate) fn arrive(
        &self,
        route: &str,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        identity: Option<Identity<'_>>,
    ) {
        let inner = &*self.inner;
        let announced = Announcement::of(headers).unwrap_or_default();
        let route_id = inner.routes.id(route);
        let route_name = inner.routes.name(route_id);
        crate::metrics::arrival(&route_name, announced.attempt());
        inner.stats.arrivals.fetch_add(1, Ordering::Relaxed);
        if announced.is_retry() {
            inner
                .stats
                .announced_retries
                .fetch_add(1, Ordering::Relaxed);
        }
        let Some(identity) = identity else {
            return;
        };
        let arrival = Arrival {
            id: identity.hash(&inner.hasher, method, path),
            now: Instant::now(),
            attempt: announced.attempt().unwrap_or_default(),
            max: announced.max().unwrap_or_default(),
            route: route_id,
            keyed: identity.keyed(),
            source: source_hash(&inner.hasher, headers),
        };
        // Closed operations are recorded as they close, under their shard's lock: a metrics
        // recorder does not wait on anything, and collecting them first would allocate on
        // every request once the table is full.
        let (entry, amplified) = inner
            .table
            .arrive(&arrival, inner.unannounced_limit, &mut |e| self.closed(e));
        if entry.arrivals == 1 {
            inner.stats.operations.fetch_add(1, Ordering::Relaxed);
        }
        if amplified {
            inner.stats.amplified.fetch_add(1, Ordering::Relaxed);
            crate::metrics::amplified(&route_name);
            self.report(&route_name, &identity, &entry, headers);
        }
    }

    /// An operation whose window ended (or that made room): its arrivals, into the histogram.
    fn closed(&self, entry: &Entry) {
        let route = self.inner.routes.name(entry.route);
        crate::metrics::operation_arrivals(&route, entry.keyed, entry.arrivals);
    }

    /// The WARN (at most one per route a minute; DEBUG otherwise) about an operation that
    /// arrived more often than allowed.
    fn report(&self, route: &str, identity: &Identity<'_>, entry: &Entry, headers: &HeaderMap) {
        let now = entry.last;
        let loud = {
            let mut warned = self
                .inner
                .warned
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match warned.get_mut(usize::from(entry.route)) {
                Some(last)
                    if last.is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY) =>
                {
                    *last = Some(now);
                    true
                }
                _ => false,
            }
        };
        let within = entry.last.saturating_duration_since(entry.opened);
        let within = if within >= Duration::from_secs(1) {
            format!("{:.1} s", within.as_secs_f64())
        } else {
            format!("{} ms", within.as_millis())
        };
        let announced = match (entry.largest_attempt, entry.largest_max) {
            (0, 0) => format!(
                "no attempt number was announced, and {} is the most one layer that does not announce may send",
                self.inner.unannounced_limit
            ),
            (attempt, 0) => format!("the largest attempt number announced was {attempt}"),
            (0, max) => format!("no attempt number was announced; the largest max was {max}"),
            (attempt, max) => {
                format!("the largest attempt number announced was {attempt} (max {max})")
            }
        };
        let sources = match entry.source_count() {
            1 => "from 1 source".to_owned(),
            n => format!("from {n} sources"),
        };
        let source = describe_source(headers);
        if loud {
            self.inner.stats.warnings.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(target: "retry_core::amplification",
                route, operation = %identity, arrivals = entry.arrivals,
                sources = entry.source_count(), source = %source,
                "operation {identity} arrived {} times within {within}; {announced}: retries are layered upstream ({sources} it can tell apart; this one: {source})",
                entry.arrivals
            );
        } else {
            tracing::debug!(target: "retry_core::amplification",
                route, operation = %identity, arrivals = entry.arrivals,
                sources = entry.source_count(), source = %source,
                "operation {identity} arrived {} times within {within}; {announced}: retries are layered upstream (another WARN for this route was written less than a minute ago)",
                entry.arrivals
            );
        }
    }
}

/// Route labels by number, so an entry of the table keeps two bytes instead of a string; at
/// most `max` of them, the rest are `other` (number 0).
struct Routes {
    names: RwLock<Names>,
    max: usize,
}

/// Label → number, and number → label.
type Names = (HashMap<Arc<str>, u16>, Vec<Arc<str>>);

impl Routes {
    fn new(max: usize) -> Routes {
        let other: Arc<str> = Arc::from(OTHER_ROUTE);
        Routes {
            names: RwLock::new((HashMap::from([(other.clone(), 0)]), vec![other])),
            max,
        }
    }

    fn id(&self, route: &str) -> u16 {
        {
            let names = self.names.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(id) = names.0.get(route) {
                return *id;
            }
            if names.1.len() > self.max {
                return 0;
            }
        }
        let mut names = self.names.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = names.0.get(route) {
            return *id;
        }
        match u16::try_from(names.1.len()) {
            Ok(id) if names.1.len() <= self.max => {
                let name: Arc<str> = Arc::from(route);
                names.0.insert(name.clone(), id);
                names.1.push(name);
                id
            }
            _ => 0,
        }
    }

    fn name(&self, id: u16) -> Arc<str> {
        let names = self.names.read().unwrap_or_else(PoisonError::into_inner);
        names
            .1
            .get(usize::from(id))
            .cloned()
            .unwrap_or_else(|| Arc::from(OTHER_ROUTE))
    }
}

#[cfg(test)]
mod tests {
    use ::http::HeaderValue;

    use super::*;

    fn keyed(key: &'static str, caller_retries: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_static(key));
        if let Some(value) = caller_retries {
            headers.insert("caller-retries", HeaderValue::from_static(value));
        }
        headers
    }

    fn arrive(observer: &AmplificationObserver, headers: &HeaderMap) {
        observer.arrive(
            "POST /pay",
            &Method::POST,
            "/pay",
            headers,
            Identity::of(headers),
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_layer_announcing_its_attempts_is_not_amplification() {
        let observer = AmplificationObserver::new();
        for value in [
            "?1;attempt=1;max=4",
            "?1;attempt=2;max=4",
            "?1;attempt=3;max=4",
            "?1;attempt=4;max=4",
        ] {
            arrive(&observer, &keyed("\"k\"", Some(value)));
        }
        let operations = observer.operations();
        assert_eq!(operations.len(), 1);
        assert_eq!(operations[0].arrivals, 4);
        assert_eq!(operations[0].largest_attempt, Some(4));
        assert!(!operations[0].amplified);
        let stats = observer.stats();
        assert_eq!((stats.announced_retries, stats.amplified), (3, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_operation_past_its_largest_max_warns_once_a_minute_per_route() {
        let observer = AmplificationObserver::new();
        for _ in 0..16 {
            arrive(&observer, &keyed("\"a\"", Some("?1;attempt=4;max=4")));
        }
        for _ in 0..16 {
            arrive(&observer, &keyed("\"b\"", None));
        }
        let stats = observer.stats();
        assert_eq!((stats.amplified, stats.warnings), (2, 1), "{stats:?}");
        tokio::time::advance(Duration::from_secs(61)).await;
        for _ in 0..6 {
            arrive(&observer, &keyed("\"c\"", None));
        }
        assert_eq!(observer.stats().warnings, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_without_identity_are_only_counted() {
        let observer = AmplificationObserver::new();
        let mut headers = HeaderMap::new();
        headers.insert("caller-retries", HeaderValue::from_static("?1;attempt=2"));
        for _ in 0..10 {
            arrive(&observer, &headers);
        }
        assert!(observer.operations().is_empty());
        let stats = observer.stats();
        assert_eq!((stats.arrivals, stats.announced_retries), (10, 10));
        assert_eq!(stats.operations, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_that_ended_is_closed_and_a_new_one_opens() {
        let observer = AmplificationObserver::builder()
            .window(Duration::from_secs(5))
            .build();
        arrive(&observer, &keyed("\"k\"", None));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(observer.operations().is_empty(), "closed when read");
        arrive(&observer, &keyed("\"k\"", None));
        assert_eq!(observer.stats().operations, 2);
    }

    #[test]
    fn routes_past_the_limit_are_other() {
        let routes = Routes::new(2);
        let a = routes.id("a");
        let b = routes.id("b");
        assert_eq!((a, b, routes.id("a")), (1, 2, 1));
        assert_eq!(routes.id("c"), 0);
        assert_eq!(&*routes.name(routes.id("d")), OTHER_ROUTE);
    }
}
