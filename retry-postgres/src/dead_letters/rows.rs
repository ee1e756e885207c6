//! Letters as `dead_letters` rows: checked and encoded before anything is written, decoded with
//! every column checked, and the writes that both parking and redrive use (many rows in one
//! statement, `unnest` over one array per column).

use std::collections::{HashMap, HashSet};
use std::pin::{Pin, pin};
use std::task::{Context, Poll};

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::sql::Fail as SqlFail;
use retry_core::dlq::row::{self, LetterRow, corrupt};
use retry_core::dlq::{AuditEntry, DeadLetter, DlqError, Failure, Resolution};

/// Why an operation failed before its errors get the server's name.
pub(super) type Fail = SqlFail<DlqError>;

/// The columns of a letter, in the order [`decode`] reads them.
macro_rules! letter_columns {
    () => {
        "msg_id, original, reason, attempts::bigint, first_failed_at, last_failed_at, trace_id, \
         class, error_type, idempotency_key, source, redacted, key_scope, key_expires_at, \
         history::text, resolved_at, resolved_by, resolved_run"
    };
}
pub(super) use letter_columns;

/// One array per column (`$1` .. `$20`), a row per letter, in [`Columns`]'s order.
macro_rules! unnest_letters {
    () => {
        "unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], \
         $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::bool[], $13::text[], \
         $14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[]) \
         AS u(msg_id, original, reason, attempts, first_failed_at, last_failed_at, trace_id, \
         class, error_type, idempotency_key, source, redacted, key_scope, key_expires_at, history, \
         resolved_at, resolved_by, resolved_run, resolved_utc, first_failed_utc)"
    };
}

/// New letters, each whole; a `msg_id` already there is left alone (the caller merges into
/// it). `$21` is when they were parked. Returns the `msg_id`s inserted.
const INSERT_NEW: &str = concat!(
    "INSERT INTO dead_letters (msg_id, original, reason, attempts, first_failed_at, \
     last_failed_at, trace_id, class, error_type, idempotency_key, source, redacted, key_scope, \
     key_expires_at, history, resolved_at, resolved_by, resolved_run, resolved_utc, \
     first_failed_utc, parked_at) \
     SELECT u.msg_id, u.original, u.reason, u.attempts, u.first_failed_at, u.last_failed_at, \
     u.trace_id, u.class, u.error_type, u.idempotency_key, u.source, u.redacted, u.key_scope, \
     u.key_expires_at, u.history::jsonb, u.resolved_at, u.resolved_by, u.resolved_run, \
     u.resolved_utc, u.first_failed_utc, $21 FROM ",
    unnest_letters!(),
    " ON CONFLICT (msg_id) DO NOTHING RETURNING msg_id"
);

/// Letters as a merge left them. The first `original` and `first_failed_at` (and so the
/// letter's place in the order) are never written again: no merge changes them.
const UPDATE_MERGED: &str = concat!(
    "UPDATE dead_letters AS d SET reason = u.reason, attempts = u.attempts, \
     last_failed_at = u.last_failed_at, trace_id = u.trace_id, class = u.class, \
     error_type = u.error_type, idempotency_key = u.idempotency_key, source = u.source, \
     redacted = u.redacted, key_scope = u.key_scope, key_expires_at = u.key_expires_at, \
     history = u.history::jsonb, resolved_at = u.resolved_at, resolved_by = u.resolved_by, \
     resolved_run = u.resolved_run, resolved_utc = u.resolved_utc, parked_at = $21 FROM ",
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

/// A letter as its row stores it, checked before anything is written: times that order,
/// `original` as JSON, and no NUL character anywhere (PostgreSQL's `text` cannot hold one, and
/// one bad letter must not fail the others written with it).
pub(super) struct Encoded {
    row: LetterRow,
}

/// [`row::ResolutionRow`], refused when a text holds a NUL (PostgreSQL text cannot).
pub(super) fn resolved_columns(
    msg_id: &str,
    resolution: &Resolution,
) -> Result<row::ResolutionRow, DlqError> {
    no_nul(msg_id, "resolved by", &resolution.by)?;
    no_nul_in(msg_id, "resolved in run", resolution.run_id.as_deref())?;
    Ok(row::ResolutionRow::new(resolution))
}

impl Encoded {
    pub(super) fn new(letter: &DeadLetter) -> Result<Self, DlqError> {
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
        if let Some(resolution) = &letter.resolved {
            resolved_columns(id, resolution)?;
        }
        Ok(Encoded {
            row: LetterRow::new(letter)?,
        })
    }

    pub(super) fn msg_id(&self) -> &str {
        &self.row.msg_id
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
    original: Vec<&'a str>,
    reason: Vec<&'a str>,
    attempts: Vec<i64>,
    first_failed_at: Vec<&'a str>,
    last_failed_at: Vec<&'a str>,
    trace_id: Vec<&'a str>,
    class: Vec<&'static str>,
    error_type: Vec<&'a str>,
    idempotency_key: Vec<Option<&'a str>>,
    source: Vec<Option<&'a str>>,
    redacted: Vec<bool>,
    key_scope: Vec<Option<&'a str>>,
    key_expires_at: Vec<Option<&'a str>>,
    history: Vec<&'a str>,
    resolved_at: Vec<Option<&'a str>>,
    resolved_by: Vec<Option<&'a str>>,
    resolved_run: Vec<Option<&'a str>>,
    resolved_utc: Vec<Option<&'a str>>,
    first_failed_utc: Vec<&'a str>,
}

impl<'a> Columns<'a> {
    fn new(letters: &[&'a Encoded]) -> Self {
        let all = |f: fn(&'a Encoded) -> &'a str| letters.iter().map(|l| f(l)).collect();
        let some = |f: fn(&'a Encoded) -> Option<&'a str>| letters.iter().map(|l| f(l)).collect();
        Columns {
            msg_id: all(|l| &l.row.msg_id),
            original: all(|l| &l.row.original),
            reason: all(|l| &l.row.reason),
            attempts: letters.iter().map(|l| l.row.attempts).collect(),
            first_failed_at: all(|l| &l.row.first_failed_at),
            last_failed_at: all(|l| &l.row.last_failed_at),
            trace_id: all(|l| &l.row.trace_id),
            class: letters.iter().map(|l| l.row.class).collect(),
            error_type: all(|l| &l.row.error_type),
            idempotency_key: some(|l| l.row.idempotency_key.as_deref()),
            source: some(|l| l.row.source.as_deref()),
            redacted: letters.iter().map(|l| l.row.redacted).collect(),
            key_scope: some(|l| l.row.key_scope.as_deref()),
            key_expires_at: some(|l| l.row.key_expires_at.as_deref()),
            history: all(|l| &l.row.history),
            resolved_at: some(|l| l.row.resolved.as_ref().map(|r| r.at.as_str())),
            resolved_by: some(|l| l.row.resolved.as_ref().map(|r| r.by.as_str())),
            resolved_run: some(|l| l.row.resolved.as_ref().and_then(|r| r.run_id.as_deref())),
            resolved_utc: some(|l| l.row.resolved.as_ref().map(|r| r.at_utc.as_str())),
            first_failed_utc: all(|l| &l.row.first_failed_utc),
        }
    }

    /// `$1` .. `$20`, then `parked_at` as `$21`.
    fn params<'p>(&'p self, parked_at: &'p String) -> [&'p (dyn ToSql + Sync); 21] {
        [
            &self.msg_id,
            &self.original,
            &self.reason,
            &self.attempts,
            &self.first_failed_at,
            &self.last_failed_at,
            &self.trace_id,
            &self.class,
            &self.error_type,
            &self.idempotency_key,
            &self.source,
            &self.redacted,
            &self.key_scope,
            &self.key_expires_at,
            &self.history,
            &self.resolved_at,
            &self.resolved_by,
            &self.resolved_run,
            &self.resolved_utc,
            &self.first_failed_utc,
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
    parked_at: &String,
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
    parked_at: &String,
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

/// A row of [`letter_columns`], every column checked.
pub(super) fn decode(row: &Row) -> Result<DeadLetter, DlqError> {
    let msg_id: String = row.try_get(0).map_err(|e| {
        DlqError::Corrupt(format!("dead_letters row with an unreadable msg_id: {e}"))
    })?;
    let id = msg_id.as_str();
    let get = |i: usize, column: &str| -> Result<Option<String>, DlqError> {
        row.try_get::<_, Option<String>>(i)
            .map_err(|e| corrupt(id, format_args!("bad {column} ({e})")))
    };
    let text = |i: usize, column: &str| -> Result<String, DlqError> {
        get(i, column)?.ok_or_else(|| corrupt(id, format_args!("{column} is NULL")))
    };
    let original = row::original(id, &text(1, "original")?)?;
    let attempts: i64 = row
        .try_get(3)
        .map_err(|e| corrupt(id, format_args!("bad attempts ({e})")))?;
    let attempts = row::attempts(id, attempts)?;
    let time = |i: usize, column: &str| row::time(id, column, &text(i, column)?);
    let class = row::class(id, &text(7, "class")?)?;
    let redacted: bool = row
        .try_get(11)
        .map_err(|e| corrupt(id, format_args!("bad redacted ({e})")))?;
    let history: Vec<Failure> = serde_json::from_str(&text(14, "history")?)
        .map_err(|e| corrupt(id, format_args!("history is not a list of failures ({e})")))?;
    let resolved = match (get(15, "resolved_at")?, get(16, "resolved_by")?) {
        (None, _) => None,
        (Some(at), Some(by)) => Some(Resolution {
            at: row::time(id, "resolved_at", &at)?,
            by,
            run_id: get(17, "resolved_run")?,
        }),
        (Some(_), None) => return Err(corrupt(id, "resolved_at without resolved_by")),
    };
    Ok(DeadLetter {
        original,
        reason: text(2, "reason")?,
        attempts,
        first_failed_at: time(4, "first_failed_at")?,
        last_failed_at: time(5, "last_failed_at")?,
        trace_id: text(6, "trace_id")?,
        class,
        error_type: text(8, "error_type")?,
        idempotency_key: get(9, "idempotency_key")?,
        source: get(10, "source")?,
        redacted,
        key_scope: get(12, "key_scope")?,
        key_expires_at: get(13, "key_expires_at")?
            .map(|at| row::time(id, "key_expires_at", &at))
            .transpose()?,
        history,
        resolved,
        msg_id,
    })
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

    fn at(text: &str) -> std::time::SystemTime {
        parse_rfc3339(text).unwrap()
    }

    fn letter() -> DeadLetter {
        DeadLetter {
            msg_id: "M-1".into(),
            original: serde_json::json!({"note": "nul\u{0} inside JSON is escaped"}),
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
    fn nul_characters_are_refused_before_anything_is_written_except_in_the_json_original() {
        assert!(Encoded::new(&letter()).is_ok());
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
        ];
        for letter in bad {
            let Err(DlqError::Serialize(message)) = Encoded::new(&letter) else {
                panic!("accepted {letter:?}");
            };
            assert!(
                message.contains("`M-1`") && message.contains("NUL"),
                "{message}"
            );
        }
    }

    #[test]
    fn resolutions_are_written_in_utc_and_unreadable_history_times_are_refused() {
        let columns = resolved_columns(
            "M-1",
            &Resolution::new("alice", at("2026-08-20T09:00:00+09:00")),
        )
        .unwrap();
        assert_eq!(columns.at, "2026-08-20T00:00:00.000+00:00");
        assert_eq!(columns.at_utc, "2026-08-20T00:00:00.000000Z");
        // The history column is read as failures: a time in it that is not RFC 3339 fails the
        // read, with the text.
        let history = r#"[{"at": "now", "reason": "r", "trace_id": "t"}]"#;
        let why = serde_json::from_str::<Vec<Failure>>(history).unwrap_err();
        assert!(why.to_string().contains("\"now\""), "{why}");
    }
}
