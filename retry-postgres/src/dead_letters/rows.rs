//! Letters as `dead_letters` rows: checked and encoded before anything is written, decoded with
//! every column checked, and the writes that both parking and redrive use (many rows in one
//! statement, `unnest` over one array per column).

use std::collections::{HashMap, HashSet};
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::GenericClient;
use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, Json, ToSql};

use crate::sql::Fail as SqlFail;
use retry_core::dlq::row::{self, corrupt};
use retry_core::dlq::{AuditEntry, DeadLetter, DlqError, Failure, Resolution};

/// Why an operation failed before its errors get the server's name.
pub(super) type Fail = SqlFail<DlqError>;

/// The columns of a letter, in the order [`decode`] reads them.
macro_rules! letter_columns {
    () => {
        "msg_id, original, reason, attempts::bigint, first_failed_at, first_failed_ns, \
         last_failed_at, last_failed_ns, trace_id, class, error_type, idempotency_key, source, \
         redacted, key_scope, key_expires_at, key_expires_ns, history, resolved_at, resolved_ns, \
         resolved_by, resolved_run"
    };
}
pub(super) use letter_columns;

/// One array per column (`$1` .. `$22`), a row per letter, in [`Columns`]'s order.
macro_rules! unnest_letters {
    () => {
        "unnest($1::text[], $2::jsonb[], $3::text[], $4::bigint[], $5::timestamptz[], \
         $6::smallint[], $7::timestamptz[], $8::smallint[], $9::text[], $10::text[], $11::text[], \
         $12::text[], $13::text[], $14::bool[], $15::text[], $16::timestamptz[], $17::smallint[], \
         $18::jsonb[], $19::timestamptz[], $20::smallint[], $21::text[], $22::text[]) \
         AS u(msg_id, original, reason, attempts, first_failed_at, first_failed_ns, \
         last_failed_at, last_failed_ns, trace_id, class, error_type, idempotency_key, source, \
         redacted, key_scope, key_expires_at, key_expires_ns, history, resolved_at, resolved_ns, \
         resolved_by, resolved_run)"
    };
}

/// New letters, each whole; a `msg_id` already there is left alone (the caller merges into
/// it). `$23` is when they were parked. Returns the `msg_id`s inserted.
const INSERT_NEW: &str = concat!(
    "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
     first_failed_ns, last_failed_at, last_failed_ns, trace_id, class, error_type, \
     idempotency_key, source, redacted, key_scope, key_expires_at, key_expires_ns, history, \
     resolved_at, resolved_ns, resolved_by, resolved_run, parked_at) \
     SELECT u.*, $23 FROM ",
    // `u.*`: the columns of `unnest_letters!`, named in the order listed here.
    unnest_letters!(),
    " ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id"
);

/// Letters as a merge left them. The first `original` and `first_failed_at` (and so the
/// letter's place in the order) are never written again: no merge changes them.
const UPDATE_MERGED: &str = concat!(
    "UPDATE dead_letters AS d SET reason = u.reason, attempts = u.attempts, \
     last_failed_at = u.last_failed_at, last_failed_ns = u.last_failed_ns, \
     trace_id = u.trace_id, class = u.class, error_type = u.error_type, \
     idempotency_key = u.idempotency_key, source = u.source, redacted = u.redacted, \
     key_scope = u.key_scope, key_expires_at = u.key_expires_at, \
     key_expires_ns = u.key_expires_ns, history = u.history, resolved_at = u.resolved_at, \
     resolved_ns = u.resolved_ns, resolved_by = u.resolved_by, resolved_run = u.resolved_run, \
     parked_at = $23 FROM ",
    unnest_letters!(),
    " WHERE d.msg_id = u.msg_id"
);

/// The letters `$1` (an array), locked for a merge in `msg_id` order: every writer locks in
/// one order, so two merging at once wait for each other instead of deadlocking.
pub(super) const LOCK_LETTERS: &str = concat!(
    "SELECT ",
    letter_columns!(),
    " FROM dead_letters WHERE msg_id = ANY($1::text[]) ORDER BY msg_id FOR UPDATE"
);

// ---- times ----

/// A time as its two columns store it: a `timestamptz` (whole microseconds) and the
/// nanoseconds below the microsecond (a `_ns` column, 0 to 999), which `timestamptz` cannot
/// hold, so that a letter reads back to the nanosecond as it was parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) at: SystemTime,
    pub(super) ns: i16,
}

/// The earliest time a column holds: 0000-01-01T00:00:00Z, where RFC 3339 text, and so every
/// other store, ends too (a letter's earlier time is written as this one).
const EARLIEST: Duration = Duration::from_secs(62_167_219_200);

/// The latest: 9999-12-31T23:59:59.999999999Z, the same end.
const LATEST: Duration = Duration::new(253_402_300_799, 999_999_999);

impl Stamp {
    /// `time` as its columns store it, cut towards the past to the microsecond (so the
    /// remainder is never negative), within the years 0000 to 9999.
    pub(super) fn of(time: SystemTime) -> Self {
        // Checked: a platform's `SystemTime` may not reach the year 0000 (Windows starts in
        // 1601), and then no time it holds is earlier.
        let time = UNIX_EPOCH
            .checked_sub(EARLIEST)
            .map_or(time, |earliest| time.max(earliest));
        let time = UNIX_EPOCH
            .checked_add(LATEST)
            .map_or(time, |latest| time.min(latest));
        let ns = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => after.subsec_nanos() % 1_000,
            Err(before) => match before.duration().subsec_nanos() % 1_000 {
                0 => 0,
                n => 1_000 - n,
            },
        };
        match time.checked_sub(Duration::from_nanos(u64::from(ns))) {
            Some(at) => Stamp {
                at,
                // Below 1_000.
                ns: i16::try_from(ns).unwrap_or(0),
            },
            // The earliest time the platform holds: kept as it is.
            None => Stamp { at: time, ns: 0 },
        }
    }

    /// The time the columns hold; `None` when `ns` is not 0 to 999.
    pub(super) fn time(at: SystemTime, ns: i16) -> Option<SystemTime> {
        let ns = u64::try_from(ns).ok().filter(|ns| *ns < 1_000)?;
        at.checked_add(Duration::from_nanos(ns))
    }
}

/// A letter as its row stores it, checked before anything is written: no NUL character
/// anywhere (PostgreSQL's `text` cannot hold one, nor can `jsonb` in a string or a key, and one
/// bad letter must not fail the others written with it), an `original` that reads back, and
/// its times split as their columns keep them.
pub(super) struct Encoded {
    letter: DeadLetter,
    first_failed: Stamp,
    last_failed: Stamp,
    key_expires: Option<Stamp>,
    resolved: Option<Stamp>,
}

/// `resolution`'s time as its columns store it, refused when a text holds a NUL (PostgreSQL
/// text cannot).
pub(super) fn resolution_time(msg_id: &str, resolution: &Resolution) -> Result<Stamp, DlqError> {
    no_nul(msg_id, "resolved by", &resolution.by)?;
    no_nul_in(msg_id, "resolved in run", resolution.run_id.as_deref())?;
    Ok(Stamp::of(resolution.at))
}

impl Encoded {
    pub(super) fn new(letter: DeadLetter) -> Result<Self, DlqError> {
        let id = letter.msg_id.as_str();
        no_nul(id, "msg_id", id)?;
        for (field, text) in [
            ("reason", letter.reason.as_str()),
            ("trace_id", &letter.trace_id),
            ("error_type", &letter.error_type),
        ] {
            no_nul(id, field, text)?;
        }
        for (field, text) in [
            ("idempotency_key", &letter.idempotency_key),
            ("source", &letter.source),
            ("key_scope", &letter.key_scope),
        ] {
            no_nul_in(id, field, text.as_deref())?;
        }
        for failure in &letter.history {
            check_failure(id, failure)?;
        }
        let resolved = letter
            .resolved
            .as_ref()
            .map(|resolution| resolution_time(id, resolution))
            .transpose()?;
        // Before the walk below, which must not go deeper than a letter that reads back.
        letter.check_readable()?;
        if json_has_nul(&letter.original) {
            return Err(DlqError::Serialize(format!(
                "dead letter `{}`: original holds a NUL character (\\u0000), which PostgreSQL jsonb cannot store",
                id.escape_debug()
            )));
        }
        Ok(Encoded {
            first_failed: Stamp::of(letter.first_failed_at),
            last_failed: Stamp::of(letter.last_failed_at),
            key_expires: letter.key_expires_at.map(Stamp::of),
            resolved,
            letter,
        })
    }

    pub(super) fn msg_id(&self) -> &str {
        &self.letter.msg_id
    }

    /// The letter as it was given.
    pub(super) fn letter(&self) -> &DeadLetter {
        &self.letter
    }
}

/// Whether `value` holds a NUL character in a string or a key: `jsonb` refuses `\u0000`.
pub(super) fn json_has_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(json_has_nul),
        Value::Object(fields) => fields
            .iter()
            .any(|(key, value)| key.contains('\0') || json_has_nul(value)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// A failure's texts, which may not hold a NUL.
pub(super) fn check_failure(msg_id: &str, failure: &Failure) -> Result<(), DlqError> {
    no_nul(msg_id, "failure reason", &failure.reason)?;
    no_nul(msg_id, "failure trace_id", &failure.trace_id)
}

/// Refuses `text` (the letter `msg_id`'s `field`) if it holds a NUL character.
pub(super) fn no_nul(msg_id: &str, field: &str, text: &str) -> Result<(), DlqError> {
    if text.contains('\0') {
        return Err(DlqError::Serialize(format!(
            "dead letter `{}`: {field} holds a NUL character, which PostgreSQL text cannot store",
            msg_id.escape_debug()
        )));
    }
    Ok(())
}

fn no_nul_in(msg_id: &str, field: &str, text: Option<&str>) -> Result<(), DlqError> {
    text.map_or(Ok(()), |text| no_nul(msg_id, field, text))
}

/// An audit row's texts, checked as letters are.
pub(super) fn check_audit(entry: &AuditEntry) -> Result<(), DlqError> {
    let id = entry.msg_id.as_str();
    for (field, text) in [
        ("audit msg_id", id),
        ("audit run_id", &entry.run_id),
        ("audit who", &entry.who),
        ("audit target", &entry.target),
    ] {
        no_nul(id, field, text)?;
    }
    no_nul_in(id, "audit outcome", entry.outcome.as_deref())
}

/// The letters of one statement, one array per column.
struct Columns<'a> {
    msg_id: Vec<&'a str>,
    original: Vec<Json<&'a Value>>,
    reason: Vec<&'a str>,
    attempts: Vec<i64>,
    first_failed_at: Vec<SystemTime>,
    first_failed_ns: Vec<i16>,
    last_failed_at: Vec<SystemTime>,
    last_failed_ns: Vec<i16>,
    trace_id: Vec<&'a str>,
    class: Vec<&'static str>,
    error_type: Vec<&'a str>,
    idempotency_key: Vec<Option<&'a str>>,
    source: Vec<Option<&'a str>>,
    redacted: Vec<bool>,
    key_scope: Vec<Option<&'a str>>,
    key_expires_at: Vec<Option<SystemTime>>,
    key_expires_ns: Vec<i16>,
    history: Vec<Json<&'a [Failure]>>,
    resolved_at: Vec<Option<SystemTime>>,
    resolved_ns: Vec<i16>,
    resolved_by: Vec<Option<&'a str>>,
    resolved_run: Vec<Option<&'a str>>,
}

impl<'a> Columns<'a> {
    fn new(letters: &[&'a Encoded]) -> Self {
        fn each<'a, T>(letters: &[&'a Encoded], f: impl Fn(&'a Encoded) -> T) -> Vec<T> {
            letters.iter().map(|l| f(l)).collect()
        }
        // A time that is absent keeps 0 in its `_ns` column.
        let ns = |stamp: Option<Stamp>| stamp.map_or(0, |s| s.ns);
        Columns {
            msg_id: each(letters, |l| l.letter.msg_id.as_str()),
            original: each(letters, |l| Json(&l.letter.original)),
            reason: each(letters, |l| l.letter.reason.as_str()),
            attempts: each(letters, |l| i64::from(l.letter.attempts)),
            first_failed_at: each(letters, |l| l.first_failed.at),
            first_failed_ns: each(letters, |l| l.first_failed.ns),
            last_failed_at: each(letters, |l| l.last_failed.at),
            last_failed_ns: each(letters, |l| l.last_failed.ns),
            trace_id: each(letters, |l| l.letter.trace_id.as_str()),
            class: each(letters, |l| l.letter.class.as_str()),
            error_type: each(letters, |l| l.letter.error_type.as_str()),
            idempotency_key: each(letters, |l| l.letter.idempotency_key.as_deref()),
            source: each(letters, |l| l.letter.source.as_deref()),
            redacted: each(letters, |l| l.letter.redacted),
            key_scope: each(letters, |l| l.letter.key_scope.as_deref()),
            key_expires_at: each(letters, |l| l.key_expires.map(|s| s.at)),
            key_expires_ns: each(letters, |l| ns(l.key_expires)),
            history: each(letters, |l| Json(l.letter.history.as_slice())),
            resolved_at: each(letters, |l| l.resolved.map(|s| s.at)),
            resolved_ns: each(letters, |l| ns(l.resolved)),
            resolved_by: each(letters, |l| {
                l.letter.resolved.as_ref().map(|r| r.by.as_str())
            }),
            resolved_run: each(letters, |l| {
                l.letter.resolved.as_ref().and_then(|r| r.run_id.as_deref())
            }),
        }
    }

    /// `$1` .. `$22`, then `parked_at` as `$23`.
    fn params<'p>(&'p self, parked_at: &'p SystemTime) -> [&'p (dyn ToSql + Sync); 23] {
        [
            &self.msg_id,
            &self.original,
            &self.reason,
            &self.attempts,
            &self.first_failed_at,
            &self.first_failed_ns,
            &self.last_failed_at,
            &self.last_failed_ns,
            &self.trace_id,
            &self.class,
            &self.error_type,
            &self.idempotency_key,
            &self.source,
            &self.redacted,
            &self.key_scope,
            &self.key_expires_at,
            &self.key_expires_ns,
            &self.history,
            &self.resolved_at,
            &self.resolved_ns,
            &self.resolved_by,
            &self.resolved_run,
            parked_at,
        ]
    }
}

/// Which transaction a statement runs in.
#[derive(Clone, Copy)]
pub(super) enum In {
    /// The caller's: the one it began, or autocommit (reads).
    Caller,
    /// One of its own, READ COMMITTED ([`read_committed`]).
    Own,
}

/// Runs `statement` (a future that sends its request when first polled, such as
/// `client.query(..)` of a prepared statement) in a READ COMMITTED transaction of its own,
/// whatever the session's default isolation: under it an `INSERT .. ON CONFLICT`, or an
/// `UPDATE` of a row another transaction changed first, waits for that transaction and checks
/// the row again instead of failing with a serialization error (which a busy letter would
/// hit again and again under SERIALIZABLE). `BEGIN`, the statement and `COMMIT` are
/// pipelined: one round trip, as in autocommit. A statement that fails leaves an aborted
/// transaction, which the `COMMIT` rolls back.
pub(super) async fn read_committed<C, T>(
    client: &C,
    statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error>
where
    C: GenericClient + Sync,
{
    let begin = pin!(client.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED"));
    let statement = pin!(statement);
    let commit = pin!(client.batch_execute("COMMIT"));
    let (mut begin, mut statement, mut commit) = (Some(begin), Some(statement), Some(commit));
    let (mut begun, mut done, mut committed) = (None, None, None);
    // Each request goes out when its future is first polled: polled in this order, they go
    // out in this order, before any answer is awaited.
    let (begun, done, committed) = std::future::poll_fn(|cx| {
        poll_once(&mut begin, &mut begun, cx);
        poll_once(&mut statement, &mut done, cx);
        poll_once(&mut commit, &mut committed, cx);
        match (begun.take(), done.take(), committed.take()) {
            (Some(b), Some(d), Some(c)) => Poll::Ready((b, d, c)),
            (b, d, c) => {
                (begun, done, committed) = (b, d, c);
                Poll::Pending
            }
        }
    })
    .await;
    begun?;
    let value = done?;
    committed?;
    Ok(value)
}

/// Polls `future` until it is ready, then keeps its output in `output`.
fn poll_once<F: Future>(
    future: &mut Option<Pin<&mut F>>,
    output: &mut Option<F::Output>,
    cx: &mut Context<'_>,
) {
    if let Some(pending) = future
        && let Poll::Ready(value) = pending.as_mut().poll(cx)
    {
        *output = Some(value);
        *future = None;
    }
}

/// Inserts `letters` (distinct `msg_id`s) in one statement, leaving a `msg_id` that is there
/// alone; the `msg_id`s inserted.
pub(super) async fn insert_new<C: GenericClient + Sync>(
    client: &C,
    letters: &[&Encoded],
    parked_at: &SystemTime,
    within: In,
) -> Result<HashSet<String>, Fail> {
    if letters.is_empty() {
        return Ok(HashSet::new());
    }
    let columns = Columns::new(letters);
    let params = columns.params(parked_at);
    // Prepared first: a statement still to prepare would go out after the pipelined `COMMIT`.
    let statement = client.prepare_cached(INSERT_NEW).await?;
    let insert = client.query(&statement, &params);
    let rows = match within {
        In::Caller => insert.await?,
        In::Own => read_committed(client, insert).await?,
    };
    Ok(rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?)
}

/// Writes `letters` (distinct `msg_id`s, rows that are there and locked) as merged, in one
/// statement.
pub(super) async fn update_merged<C: GenericClient + Sync>(
    client: &C,
    letters: &[&Encoded],
    parked_at: &SystemTime,
) -> Result<(), Fail> {
    if letters.is_empty() {
        return Ok(());
    }
    let columns = Columns::new(letters);
    let statement = client.prepare_cached(UPDATE_MERGED).await?;
    client
        .execute(&statement, &columns.params(parked_at))
        .await?;
    Ok(())
}

/// Locks the letters `msg_ids` for a merge ([`LOCK_LETTERS`]): each one there, decoded (or why
/// it cannot be), by `msg_id`.
pub(super) async fn lock_letters<C: GenericClient + Sync>(
    client: &C,
    msg_ids: &[&str],
) -> Result<HashMap<String, Result<DeadLetter, DlqError>>, Fail> {
    let statement = client.prepare_cached(LOCK_LETTERS).await?;
    let rows = client.query(&statement, &[&msg_ids]).await?;
    rows.iter()
        .map(|row| {
            let msg_id: String = row.try_get(0)?;
            Ok((msg_id, decode(row)))
        })
        .collect()
}

/// Column `i` (`column`) of the letter `msg_id`'s row, or why it cannot be read.
fn column<'r, T: FromSql<'r>>(
    row: &'r Row,
    msg_id: &str,
    i: usize,
    column: &str,
) -> Result<T, DlqError> {
    row.try_get(i)
        .map_err(|e| corrupt(msg_id, format_args!("bad {column} ({e})")))
}

/// The time `name` in columns `i` (`timestamptz`) and `i + 1` (its `_ns`), `None` when the
/// first is NULL.
fn time_in(row: &Row, msg_id: &str, i: usize, name: &str) -> Result<Option<SystemTime>, DlqError> {
    let at: Option<SystemTime> = column(row, msg_id, i, name)?;
    let ns: i16 = column(row, msg_id, i + 1, name)?;
    at.map(|at| stamped(msg_id, name, at, ns)).transpose()
}

/// The letter `msg_id`'s time `name` as its two columns hold it, `at` and `ns`.
pub(super) fn stamped(
    msg_id: &str,
    name: &str,
    at: SystemTime,
    ns: i16,
) -> Result<SystemTime, DlqError> {
    Stamp::time(at, ns).ok_or_else(|| {
        corrupt(
            msg_id,
            format_args!("{name} has {ns} nanoseconds past its microsecond"),
        )
    })
}

/// The time of the `NOT NULL` columns `i` and `i + 1`.
fn time(row: &Row, msg_id: &str, i: usize, column: &str) -> Result<SystemTime, DlqError> {
    time_in(row, msg_id, i, column)?
        .ok_or_else(|| corrupt(msg_id, format_args!("{column} is NULL")))
}

/// A row of [`letter_columns`], every column checked.
pub(super) fn decode(row: &Row) -> Result<DeadLetter, DlqError> {
    let msg_id: String = row.try_get(0).map_err(|e| {
        DlqError::Corrupt(format!("dead_letters row with an unreadable msg_id: {e}"))
    })?;
    let id = msg_id.as_str();
    let attempts = row::attempts(id, column(row, id, 3, "attempts")?)?;
    let class = row::class(id, &column::<String>(row, id, 9, "class")?)?;
    let Json(history): Json<Vec<Failure>> = row.try_get(17).map_err(|e| {
        corrupt(
            id,
            format_args!("history is not a list of failures ({})", error_source(&e)),
        )
    })?;
    let resolved = match (
        time_in(row, id, 18, "resolved_at")?,
        column::<Option<String>>(row, id, 20, "resolved_by")?,
    ) {
        (None, _) => None,
        (Some(at), Some(by)) => Some(Resolution {
            at,
            by,
            run_id: column(row, id, 21, "resolved_run")?,
        }),
        (Some(_), None) => return Err(corrupt(id, "resolved_at without resolved_by")),
    };
    Ok(DeadLetter {
        original: column(row, id, 1, "original")?,
        reason: column(row, id, 2, "reason")?,
        attempts,
        first_failed_at: time(row, id, 4, "first_failed_at")?,
        last_failed_at: time(row, id, 6, "last_failed_at")?,
        trace_id: column(row, id, 8, "trace_id")?,
        class,
        error_type: column(row, id, 10, "error_type")?,
        idempotency_key: column(row, id, 11, "idempotency_key")?,
        source: column(row, id, 12, "source")?,
        redacted: column(row, id, 13, "redacted")?,
        key_scope: column(row, id, 14, "key_scope")?,
        key_expires_at: time_in(row, id, 15, "key_expires_at")?,
        history,
        resolved,
        msg_id,
    })
}

/// What a column could not be read as: the decoder's own error (the serde error of a JSON
/// column) rather than the driver's "error deserializing column N" around it.
fn error_source(e: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    e.source()
        .map_or_else(|| e.to_string(), ToString::to_string)
}

/// A stored letter that could not be read, for each caller that wrote to it (the error is
/// not `Clone`).
pub(super) fn same_error(e: &DlqError) -> DlqError {
    match e {
        DlqError::Corrupt(what) => DlqError::Corrupt(what.clone()),
        DlqError::Serialize(what) => DlqError::Serialize(what.clone()),
        other => DlqError::Io(other.to_string().into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_core::dlq::FailureClass;
    use retry_core::time::parse_rfc3339;

    fn at(text: &str) -> SystemTime {
        parse_rfc3339(text).unwrap()
    }

    fn letter() -> DeadLetter {
        DeadLetter {
            msg_id: "M-1".into(),
            original: serde_json::json!({"note": "naïve ✓", "list": [1, 2.5, null]}),
            reason: "r".into(),
            attempts: 1,
            first_failed_at: at("2026-08-19T02:11:03+09:00"),
            last_failed_at: at("2026-08-19T02:12:47Z"),
            trace_id: "t".into(),
            class: FailureClass::Data,
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

    #[test]
    fn nul_characters_are_refused_before_anything_is_written() {
        assert!(Encoded::new(letter()).is_ok());
        let bad = [
            DeadLetter {
                reason: "a\0b".into(),
                ..letter()
            },
            DeadLetter {
                source: Some("x\0".into()),
                ..letter()
            },
            DeadLetter {
                history: vec![Failure {
                    at: at("2026-08-19T00:00:00Z"),
                    reason: "\0".into(),
                    trace_id: "t".into(),
                }],
                ..letter()
            },
            DeadLetter {
                resolved: Some(Resolution::new("al\0ce", at("2026-08-20T00:00:00Z"))),
                ..letter()
            },
            // `jsonb` refuses `\u0000` in a string or a key, however deep.
            DeadLetter {
                original: serde_json::json!({"a": [{"note": "nul\u{0} inside"}]}),
                ..letter()
            },
            DeadLetter {
                original: serde_json::json!({"k\u{0}": 1}),
                ..letter()
            },
        ];
        for letter in bad {
            let Err(DlqError::Serialize(message)) = Encoded::new(letter.clone()) else {
                panic!("accepted {letter:?}");
            };
            assert!(
                message.contains("`M-1`") && message.contains("NUL"),
                "{message}"
            );
        }
    }

    #[test]
    fn times_split_into_microseconds_and_the_nanoseconds_below_and_join_again() {
        for text in [
            "2026-08-19T02:12:47.123456789+09:00",
            "2026-08-19T02:12:47.123+00:00",
            "2026-08-19T02:12:47Z",
            "1969-12-31T23:59:59.999999999Z",
            "1969-12-31T23:59:59.000000001Z",
            "1999-12-31T23:59:59.000000500Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999Z",
        ] {
            let time = at(text);
            let stamp = Stamp::of(time);
            assert!((0..1_000).contains(&stamp.ns), "{text}: {stamp:?}");
            // Whole microseconds: what `timestamptz` holds exactly.
            let micros = match stamp.at.duration_since(UNIX_EPOCH) {
                Ok(after) => after.subsec_nanos() % 1_000,
                Err(before) => before.duration().subsec_nanos() % 1_000,
            };
            assert_eq!(micros, 0, "{text}");
            assert_eq!(Stamp::time(stamp.at, stamp.ns), Some(time), "{text}");
        }
        let last = Stamp::of(at("2026-08-19T02:12:47.123456789Z"));
        assert_eq!(last.ns, 789);
        assert_eq!(last.at, at("2026-08-19T02:12:47.123456Z"));
        // Beyond the years 0000 to 9999, as RFC 3339 text ends.
        let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(
            Stamp::time(Stamp::of(far).at, Stamp::of(far).ns),
            Some(at("9999-12-31T23:59:59.999999999Z"))
        );
        assert_eq!(Stamp::time(last.at, 1_000), None);
        assert_eq!(Stamp::time(last.at, -1), None);
    }
}
