//! The conformance suite every [`DeadLetterStore`] passes: the dead-letter contract, as checks
//! any store can run (feature `test-suite`).
//!
//! [`run`] gives each check a fresh, empty store from the factory and panics with the names and
//! messages of the checks that failed; [`check_all`] returns the [`Report`] instead. Every check
//! is a public function of its own, named for the behaviour it checks.
//!
//! ```
//! use retry_core::dlq::{MemoryDeadLetters, conformance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! conformance::run(async || MemoryDeadLetters::new()).await;
//! # }
//! ```
//!
//! The checks hold a store to the contract on [`DeadLetterStore`]: a letter is never
//! overwritten (a re-park merges, [`DeadLetter::absorb`]); acknowledging resolves and keeps the
//! letter with who, when and which run; only resolved letters are purged, by age; pages follow
//! the order (`first_failed_at`, `msg_id`) and their cursor; one run at a time holds a letter's
//! lease, however many ask at once, until it ends or runs out; the audit keeps one row per run
//! and letter. Run on Tokio's real clock: the lease checks wait out a lease of 200 ms. They do
//! not check durability, group commit or behaviour under outages: those belong to the store's
//! own tests.

use std::time::{Duration, SystemTime};

use super::{
    AuditEntry, DeadLetter, DeadLetterStore, DlqError, Failure, FailureClass, MAX_ORIGINAL_DEPTH,
    Page, RedriveRecord, Resolution,
};
pub use crate::conformance::{CheckResult, Report};
use crate::conformance::{check, join_all};
use crate::time::parse_rfc3339;

/// A lease the checks wait out.
const SHORT: Duration = Duration::from_millis(200);
/// A lease no check waits out.
const LONG: Duration = Duration::from_secs(60);
/// How many runs ask for one letter's lease at once.
const CONCURRENT: usize = 32;

/// The checks, in the order [`check_all`] runs them.
pub const CHECKS: &[&str] = &[
    "parked_letter_reads_back_whole",
    "only_letters_that_read_back_are_parked",
    "reparking_keeps_the_first_original",
    "pages_follow_the_order_and_the_cursor",
    "pages_filter_by_class_and_source",
    "resolved_letter_is_kept_with_who_and_when",
    "reparking_a_resolved_letter_opens_it_again",
    "one_run_holds_a_lease",
    "a_lease_runs_out",
    "concurrent_leases_have_one_winner",
    "resolve_respects_the_lease",
    "put_back_merges_the_failure_and_ends_the_lease",
    "purge_deletes_only_resolved_letters_by_age",
    "audit_rows_complete_their_intent",
    "redrive_records_are_kept_in_order",
];

/// Runs every check, each on a fresh store from `new_store`; panics with the report if any
/// failed.
///
/// # Panics
/// When a check fails: the message lists every check and why the failed ones failed.
pub async fn run<S, F>(new_store: F)
where
    S: DeadLetterStore,
    F: AsyncFnMut() -> S,
{
    let report = check_all(new_store).await;
    if !report.passed() {
        panic!("{report}");
    }
}

/// Runs every check, each on a fresh store from `new_store`, and reports.
///
/// ```
/// use retry_core::dlq::{MemoryDeadLetters, conformance};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let report = conformance::check_all(async || MemoryDeadLetters::new()).await;
/// assert!(report.passed(), "{report}");
/// assert_eq!(report.results().len(), conformance::CHECKS.len());
/// # }
/// ```
pub async fn check_all<S, F>(mut new_store: F) -> Report
where
    S: DeadLetterStore,
    F: AsyncFnMut() -> S,
{
    let mut results = Vec::with_capacity(CHECKS.len());
    macro_rules! checks {
        ($($check:ident),* $(,)?) => {$(
            let store = new_store().await;
            results.push(check(stringify!($check), $check(&store)).await);
            drop(store);
        )*};
    }
    checks!(
        parked_letter_reads_back_whole,
        only_letters_that_read_back_are_parked,
        reparking_keeps_the_first_original,
        pages_follow_the_order_and_the_cursor,
        pages_filter_by_class_and_source,
        resolved_letter_is_kept_with_who_and_when,
        reparking_a_resolved_letter_opens_it_again,
        one_run_holds_a_lease,
        a_lease_runs_out,
        concurrent_leases_have_one_winner,
        resolve_respects_the_lease,
        put_back_merges_the_failure_and_ends_the_lease,
        purge_deletes_only_resolved_letters_by_age,
        audit_rows_complete_their_intent,
        redrive_records_are_kept_in_order,
    );
    debug_assert_eq!(
        results.iter().map(|r| r.name()).collect::<Vec<_>>(),
        CHECKS,
        "CHECKS lists the checks as check_all runs them"
    );
    Report::new("dead-letter store", results)
}

// ---- the checks ----

/// Every field of a parked letter reads back as it was parked (its times to the nanosecond,
/// whatever their offsets), and the letter counts as pending.
pub async fn parked_letter_reads_back_whole<S: DeadLetterStore + ?Sized>(store: &S) {
    let mut sent = letter("M-1", "2026-08-19T02:11:03+09:00");
    sent.idempotency_key = Some("deposit:M-1".into());
    sent.source = Some("payments::deposit".into());
    sent.redacted = true;
    sent.key_scope = Some("http".into());
    sent.key_expires_at = Some(time("2026-08-26T02:11:03+09:00"));
    // Finer than the millisecond the library writes its own times to: still the same instant.
    sent.last_failed_at = time("2026-08-19T02:12:47.123456789+09:00");
    sent.original = serde_json::json!({"amount": 10, "to": ["a", "b"], "note": "naïve ✓"});
    ok(store.park(&sent).await, "park");
    assert_eq!(
        ok(store.get("M-1").await, "get"),
        Some(sent.clone()),
        "get returns the letter as parked"
    );
    assert_eq!(
        ok(store.get("M-2").await, "get"),
        None,
        "a letter never parked is None"
    );
    let page = ok(store.page(&Page::first(10)).await, "page");
    assert_eq!(
        page,
        vec![sent.clone()],
        "the page holds the one pending letter"
    );
    let stats = ok(store.stats().await, "stats");
    assert_eq!(
        (
            stats.pending,
            stats.system,
            stats.data,
            stats.resolved,
            stats.leased
        ),
        (1, 1, 0, 0, 0),
        "stats of one pending system letter: {stats:?}"
    );
    assert_eq!(stats.oldest_first_failed_at, Some(sent.first_failed_at));
}

/// A letter whose original nests [`MAX_ORIGINAL_DEPTH`] levels parks and reads back whole; one
/// level more is refused with [`DlqError::Serialize`] ([`DeadLetter::check_readable`]) before
/// anything is written, as a new letter and as a re-park of a parked one, and the store goes on.
pub async fn only_letters_that_read_back_are_parked<S: DeadLetterStore + ?Sized>(store: &S) {
    let mut deepest = letter("M-deepest", "2026-08-19T02:00:00Z");
    deepest.original = nested(MAX_ORIGINAL_DEPTH);
    ok(store.park(&deepest).await, "park the deepest letter");
    assert_eq!(
        ok(store.get("M-deepest").await, "get"),
        Some(deepest.clone()),
        "the deepest letter reads back whole"
    );

    let mut too_deep = letter("M-too-deep", "2026-08-19T03:00:00Z");
    too_deep.original = nested(MAX_ORIGINAL_DEPTH + 1);
    match store.park(&too_deep).await {
        Err(DlqError::Serialize(_)) => {}
        other => panic!(
            "a letter nested one level deeper than it could be read back: expected \
             Err(DlqError::Serialize), got {other:?}"
        ),
    }
    let mut again = letter("M-deepest", "2026-08-19T04:00:00Z");
    again.original = nested(MAX_ORIGINAL_DEPTH + 1);
    assert!(
        matches!(store.park(&again).await, Err(DlqError::Serialize(_))),
        "a re-park with a too deep original is refused too"
    );

    assert_eq!(
        ok(store.get("M-too-deep").await, "get"),
        None,
        "nothing parked"
    );
    assert_eq!(
        ok(store.get("M-deepest").await, "get"),
        Some(deepest.clone()),
        "the refused re-park changed nothing"
    );
    assert_eq!(
        ok(store.page(&Page::first(10)).await, "page"),
        vec![deepest],
        "the store still reads"
    );
    assert_eq!(ok(store.stats().await, "stats").pending, 1);
}

/// Parking a `msg_id` again keeps the first original and first failure, adds the attempts and
/// keeps the earlier reason in the history.
pub async fn reparking_keeps_the_first_original<S: DeadLetterStore + ?Sized>(store: &S) {
    let first = letter("M-1", "2026-08-19T02:00:00Z");
    let mut again = letter("M-1", "2026-08-19T05:00:00Z");
    again.original = serde_json::json!({"amount": 999});
    again.reason = "gave up after 3 attempts: timeout".into();
    again.attempts = 3;
    again.class = FailureClass::Data;
    ok(store.park(&first).await, "park");
    ok(store.park(&again).await, "park again");
    let mut expected = first.clone();
    expected.absorb(&again);
    let stored = ok(store.get("M-1").await, "get").expect("the letter is there");
    assert_eq!(
        stored, expected,
        "a re-park merges as DeadLetter::absorb does"
    );
    assert_eq!(stored.original, first.original, "the first original stays");
    assert_eq!(stored.attempts, 8);
    let stats = ok(store.stats().await, "stats");
    assert_eq!(
        (stats.pending, stats.data),
        (1, 1),
        "still one letter, now of class data"
    );
}

/// Pages come in the order (`first_failed_at`, `msg_id`), whatever order the letters were parked
/// in and whatever offsets their times carry, and the cursor continues without a gap or repeat.
pub async fn pages_follow_the_order_and_the_cursor<S: DeadLetterStore + ?Sized>(store: &S) {
    // 25 letters, parked in a scrambled order; two share a first failure (then msg_id orders),
    // and half are written with a +09:00 offset.
    let mut expected = Vec::new();
    for i in (0..25u32).map(|i| (i * 7) % 25) {
        let minute = if i == 24 { 23 } else { i };
        let at = if i % 2 == 0 {
            format!("2026-08-19T02:{minute:02}:00Z")
        } else {
            format!("2026-08-19T11:{minute:02}:00+09:00")
        };
        let l = letter(&format!("M-{i:02}"), &at);
        ok(store.park(&l).await, "park");
        expected.push(l);
    }
    expected.sort_by(|a, b| (a.first_failed_at, &a.msg_id).cmp(&(b.first_failed_at, &b.msg_id)));
    let mut seen = Vec::new();
    let mut page = Page::first(10);
    loop {
        let letters = ok(store.page(&page).await, "page");
        assert!(
            letters.len() <= 10,
            "a page holds at most its limit, got {}",
            letters.len()
        );
        let Some(last) = letters.last() else { break };
        page = page.next_after(last);
        seen.extend(letters);
    }
    let ids = |v: &[DeadLetter]| v.iter().map(|l| l.msg_id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&seen),
        ids(&expected),
        "three pages, in order, nothing missed or repeated"
    );
}

/// A page of one class, or one source, holds only those letters.
pub async fn pages_filter_by_class_and_source<S: DeadLetterStore + ?Sized>(store: &S) {
    for i in 0..6u32 {
        let mut l = letter(&format!("M-{i}"), &format!("2026-08-19T02:0{i}:00Z"));
        l.class = if i % 2 == 0 {
            FailureClass::System
        } else {
            FailureClass::Data
        };
        l.source = Some(if i < 3 { "a::send" } else { "b::send" }.into());
        ok(store.park(&l).await, "park");
    }
    let ids = |v: Vec<DeadLetter>| v.into_iter().map(|l| l.msg_id).collect::<Vec<_>>();
    let data = ok(
        store.page(&Page::first(10).class(FailureClass::Data)).await,
        "page",
    );
    assert_eq!(ids(data), ["M-1", "M-3", "M-5"], "class=data");
    let b = ok(store.page(&Page::first(10).source("b::send")).await, "page");
    assert_eq!(ids(b), ["M-3", "M-4", "M-5"], "source=b::send");
    let both = Page::first(10)
        .source("a::send")
        .class(FailureClass::System);
    assert_eq!(
        ids(ok(store.page(&both).await, "page")),
        ["M-0", "M-2"],
        "both"
    );
    let stats = ok(store.stats().await, "stats");
    assert_eq!((stats.pending, stats.system, stats.data), (6, 3, 3));
}

/// Acknowledging resolves: the letter leaves the pending pages and counts but stays readable
/// with who, when and which run; acknowledging it again answers `false`.
pub async fn resolved_letter_is_kept_with_who_and_when<S: DeadLetterStore + ?Sized>(store: &S) {
    ok(
        store.park(&letter("M-1", "2026-08-19T02:00:00Z")).await,
        "park",
    );
    ok(
        store.park(&letter("M-2", "2026-08-19T02:01:00Z")).await,
        "park",
    );
    let resolution = Resolution::new("alice", time("2026-08-20T09:00:00Z")).in_run("run-1");
    assert!(
        ok(store.resolve("M-1", &resolution).await, "resolve"),
        "a pending letter resolves"
    );
    assert!(
        !ok(store.resolve("M-1", &resolution).await, "resolve again"),
        "a resolved letter is not resolved twice"
    );
    assert!(
        !ok(store.resolve("M-9", &resolution).await, "resolve"),
        "an unknown letter: false"
    );
    let kept = ok(store.get("M-1").await, "get").expect("a resolved letter is kept");
    assert_eq!(
        kept.resolved,
        Some(resolution),
        "with who, when and the run"
    );
    let page = ok(store.page(&Page::first(10)).await, "page");
    assert_eq!(page.len(), 1, "only M-2 is pending");
    assert_eq!(page[0].msg_id, "M-2");
    let stats = ok(store.stats().await, "stats");
    assert_eq!((stats.pending, stats.resolved), (1, 1), "{stats:?}");
    assert_eq!(
        stats.oldest_first_failed_at,
        Some(time("2026-08-19T02:01:00Z"))
    );
}

/// A message that gives up again after its letter was resolved is pending again, with its
/// first original.
pub async fn reparking_a_resolved_letter_opens_it_again<S: DeadLetterStore + ?Sized>(store: &S) {
    let first = letter("M-1", "2026-08-19T02:00:00Z");
    ok(store.park(&first).await, "park");
    ok(
        store
            .resolve(
                "M-1",
                &Resolution::new("alice", time("2026-08-20T09:00:00Z")),
            )
            .await,
        "resolve",
    );
    let mut again = letter("M-1", "2026-08-21T02:00:00Z");
    again.original = serde_json::json!("second");
    ok(store.park(&again).await, "park again");
    let stored = ok(store.get("M-1").await, "get").expect("there");
    assert!(stored.is_pending(), "pending again");
    assert_eq!(stored.original, first.original, "the first original stays");
    assert_eq!(ok(store.stats().await, "stats").pending, 1);
}

/// One run at a time holds a letter: another run gets `None` until the holder releases it; the
/// holder may take it again; a run that does not hold it cannot release it.
pub async fn one_run_holds_a_lease<S: DeadLetterStore + ?Sized>(store: &S) {
    let parked = letter("M-1", "2026-08-19T02:00:00Z");
    ok(store.park(&parked).await, "park");
    let taken = ok(store.lease("M-1", "run-a", LONG).await, "lease");
    assert_eq!(
        taken,
        Some(parked.clone()),
        "run-a takes the letter and gets it whole"
    );
    assert_eq!(
        ok(store.lease("M-1", "run-b", LONG).await, "lease"),
        None,
        "run-b does not"
    );
    assert!(
        ok(store.lease("M-1", "run-a", LONG).await, "lease").is_some(),
        "the holder takes it again (renewed)"
    );
    assert_eq!(
        ok(store.stats().await, "stats").leased,
        1,
        "one letter is leased"
    );
    assert!(
        !ok(store.release("M-1", "run-b").await, "release"),
        "run-b holds nothing"
    );
    assert!(
        ok(store.release("M-1", "run-a").await, "release"),
        "run-a releases"
    );
    assert!(
        ok(store.lease("M-1", "run-b", LONG).await, "lease").is_some(),
        "released: run-b takes it"
    );
    assert_eq!(
        ok(store.lease("M-9", "run-a", LONG).await, "lease"),
        None,
        "no such letter"
    );
    ok(
        store
            .resolve(
                "M-1",
                &Resolution::new("bob", time("2026-08-20T09:00:00Z")).in_run("run-b"),
            )
            .await,
        "resolve",
    );
    assert_eq!(
        ok(store.lease("M-1", "run-c", LONG).await, "lease"),
        None,
        "a resolved letter is not leased"
    );
}

/// A lease that ran out lets another run take the letter (a run that died keeps it no longer
/// than its lease).
pub async fn a_lease_runs_out<S: DeadLetterStore + ?Sized>(store: &S) {
    ok(
        store.park(&letter("M-1", "2026-08-19T02:00:00Z")).await,
        "park",
    );
    let started = std::time::Instant::now();
    assert!(ok(store.lease("M-1", "run-a", SHORT).await, "lease").is_some());
    let early = ok(store.lease("M-1", "run-b", LONG).await, "lease");
    if started.elapsed() < SHORT {
        assert_eq!(early, None, "the lease still runs");
    }
    tokio::time::sleep(SHORT + Duration::from_millis(100)).await;
    assert!(
        ok(store.lease("M-1", "run-b", LONG).await, "lease").is_some(),
        "run-a's lease ran out: run-b takes the letter"
    );
    assert!(
        !ok(store.release("M-1", "run-a").await, "release"),
        "run-a no longer holds it"
    );
}

/// Many runs asking for one letter's lease at once: exactly one gets it.
pub async fn concurrent_leases_have_one_winner<S: DeadLetterStore + ?Sized>(store: &S) {
    ok(
        store.park(&letter("M-1", "2026-08-19T02:00:00Z")).await,
        "park",
    );
    let runs: Vec<String> = (0..CONCURRENT).map(|i| format!("run-{i}")).collect();
    let answers = join_all(
        runs.iter()
            .map(|run| store.lease("M-1", run, LONG))
            .collect(),
    )
    .await;
    let winners = answers
        .into_iter()
        .map(|a| ok(a, "lease"))
        .filter(Option::is_some)
        .count();
    assert_eq!(
        winners, 1,
        "{CONCURRENT} runs asked at once: exactly one holds the letter"
    );
}

/// While a run holds the lease, only that run resolves the letter; a person (no run) waits
/// for the lease to end.
pub async fn resolve_respects_the_lease<S: DeadLetterStore + ?Sized>(store: &S) {
    ok(
        store.park(&letter("M-1", "2026-08-19T02:00:00Z")).await,
        "park",
    );
    assert!(ok(store.lease("M-1", "run-a", LONG).await, "lease").is_some());
    let at = time("2026-08-20T09:00:00Z");
    assert!(
        !ok(
            store
                .resolve("M-1", &Resolution::new("bob", at).in_run("run-b"))
                .await,
            "resolve"
        ),
        "run-b does not hold the letter"
    );
    assert!(
        !ok(
            store.resolve("M-1", &Resolution::new("carol", at)).await,
            "resolve"
        ),
        "a person does not resolve a letter a run is sending"
    );
    assert!(
        ok(
            store
                .resolve("M-1", &Resolution::new("alice", at).in_run("run-a"))
                .await,
            "resolve"
        ),
        "the holder resolves it"
    );
    assert_eq!(
        ok(store.stats().await, "stats").leased,
        0,
        "resolving ends the lease"
    );
}

/// A redrive that failed again merges one attempt and the failure into the letter and ends the
/// lease; a run that does not hold the letter cannot put it back.
pub async fn put_back_merges_the_failure_and_ends_the_lease<S: DeadLetterStore + ?Sized>(
    store: &S,
) {
    let parked = letter("M-1", "2026-08-19T02:00:00Z");
    ok(store.park(&parked).await, "park");
    let failure = Failure {
        at: time("2026-08-20T09:00:00Z"),
        reason: "redrive by alice failed: 503".into(),
        trace_id: "run-a".into(),
    };
    assert!(
        !ok(store.put_back("M-1", "run-a", &failure).await, "put_back"),
        "not leased: nothing to put back"
    );
    assert!(ok(store.lease("M-1", "run-a", LONG).await, "lease").is_some());
    assert!(
        !ok(store.put_back("M-1", "run-b", &failure).await, "put_back"),
        "run-b: false"
    );
    assert!(
        ok(store.put_back("M-1", "run-a", &failure).await, "put_back"),
        "the holder: true"
    );
    let mut expected = parked.clone();
    expected.failed_again(1, failure);
    assert_eq!(
        ok(store.get("M-1").await, "get"),
        Some(expected),
        "merged as failed_again does"
    );
    assert!(
        ok(store.lease("M-1", "run-b", LONG).await, "lease").is_some(),
        "the lease ended: run-b takes it"
    );
}

/// Purging deletes resolved letters resolved before the cut, and nothing else.
pub async fn purge_deletes_only_resolved_letters_by_age<S: DeadLetterStore + ?Sized>(store: &S) {
    let now = SystemTime::now();
    let long_ago = now - Duration::from_secs(30 * 86_400);
    let lately = now - Duration::from_secs(60);
    for id in ["M-old", "M-new", "M-pending"] {
        let mut parked = letter(id, "2026-08-19T02:00:00Z");
        (parked.first_failed_at, parked.last_failed_at) = (long_ago, long_ago);
        ok(store.park(&parked).await, "park");
    }
    ok(
        store
            .resolve("M-old", &Resolution::new("alice", long_ago))
            .await,
        "resolve",
    );
    ok(
        store
            .resolve("M-new", &Resolution::new("alice", lately))
            .await,
        "resolve",
    );
    let cut = now - Duration::from_secs(7 * 86_400);
    assert_eq!(
        ok(store.purge_resolved(cut).await, "purge"),
        1,
        "only M-old goes"
    );
    assert_eq!(ok(store.get("M-old").await, "get"), None);
    assert!(
        ok(store.get("M-new").await, "get").is_some(),
        "resolved lately: kept"
    );
    assert!(
        ok(store.get("M-pending").await, "get").is_some(),
        "pending: never purged"
    );
    assert_eq!(
        ok(store.purge_resolved(now).await, "purge"),
        1,
        "M-new, when the cut passes it"
    );
    assert!(
        ok(store.get("M-pending").await, "get").is_some(),
        "pending: never purged"
    );
}

/// The audit keeps one row per run and letter: the intent, then the same row with its outcome;
/// a row without an outcome stays as it was written.
pub async fn audit_rows_complete_their_intent<S: DeadLetterStore + ?Sized>(store: &S) {
    let at = time("2026-08-20T09:00:00Z");
    let one = AuditEntry::intent("run-a", "M-1", "alice", "deposit", at);
    let two = AuditEntry::intent("run-a", "M-2", "alice", "deposit", at);
    let other = AuditEntry::intent("run-b", "M-1", "bob", "deposit", at);
    ok(store.audit(&one).await, "audit");
    ok(store.audit(&two).await, "audit");
    ok(store.audit(&other).await, "audit");
    let done = one
        .clone()
        .finished("redriven", time("2026-08-20T09:00:01Z"));
    ok(store.audit(&done).await, "audit");
    assert_eq!(
        ok(store.audit_rows(Some("run-a")).await, "audit_rows"),
        vec![done.clone(), two.clone()],
        "run-a: M-1 completed, M-2 still an intent, in the order first written"
    );
    assert_eq!(
        ok(store.audit_rows(Some("run-b")).await, "audit_rows"),
        vec![other.clone()]
    );
    assert_eq!(
        ok(store.audit_rows(None).await, "audit_rows"),
        vec![done, two, other]
    );
}

/// Redrive summaries come back in the order they were recorded.
pub async fn redrive_records_are_kept_in_order<S: DeadLetterStore + ?Sized>(store: &S) {
    let record = |run_id: &str| RedriveRecord {
        run_id: run_id.into(),
        who: "alice".into(),
        filter: "all".into(),
        target: "deposit".into(),
        started_at: time("2026-08-20T09:00:00.000+00:00"),
        finished_at: time("2026-08-20T09:00:02.000+00:00"),
        limit: 10,
        rate_per_second: 5,
        selected: 1,
        succeeded: 1,
        failed: 0,
        skipped: 0,
        stopped: None,
    };
    ok(store.record_redrive(&record("run-b")).await, "record");
    ok(store.record_redrive(&record("run-a")).await, "record");
    let runs = ok(store.redrives().await, "redrives");
    assert_eq!(runs, vec![record("run-b"), record("run-a")]);
}

// ---- helpers ----

/// A pending system letter `msg_id` that first and last failed `at`.
fn letter(msg_id: &str, at: &str) -> DeadLetter {
    DeadLetter {
        msg_id: msg_id.into(),
        original: serde_json::json!({"msg_id": msg_id, "amount": 10}),
        reason: "gave up after 5 attempts: 503 Service Unavailable".into(),
        attempts: 5,
        first_failed_at: time(at),
        last_failed_at: time(at),
        trace_id: "a1b2c3d4".into(),
        class: FailureClass::System,
        error_type: "FetchError".into(),
        idempotency_key: None,
        source: None,
        redacted: false,
        key_scope: None,
        key_expires_at: None,
        history: Vec::new(),
        resolved: None,
    }
}

/// An original nested `depth` levels deep, objects and arrays in turn, a string innermost.
fn nested(depth: usize) -> serde_json::Value {
    let mut value = serde_json::json!("innermost");
    for level in 0..depth {
        value = if level % 2 == 0 {
            serde_json::json!([value])
        } else {
            serde_json::json!({ "level": value })
        };
    }
    value
}

/// The instant of `text`, an RFC 3339 time the checks spell out.
#[track_caller]
fn time(text: &str) -> SystemTime {
    match parse_rfc3339(text) {
        Some(time) => time,
        None => panic!("{text:?} is not an RFC 3339 time"),
    }
}

/// Unwraps an operation the contract says succeeds.
#[track_caller]
fn ok<T>(result: Result<T, super::DlqError>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("{what} failed: {e}"),
    }
}
