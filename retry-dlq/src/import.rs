//! `import FILE --into STORE`: the letters of a `JsonlSink` file moved into a store, a line at a
//! time, so they can be listed, acknowledged and redriven there.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use retry_core::dlq::{DeadLetterStore, JsonlLine, JsonlReader};
use retry_sqlite::SqliteDeadLetters;

use crate::{EXIT_FLAGGED, EXIT_OK, Failure, existing_file, report};

/// What `import` made of a msg_id, from its first line in the file on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// The store had it before: every line of it is skipped.
    There,
    /// Parked by this import, pending.
    Pending,
    /// Parked by this import, and resolved.
    Resolved,
}

/// What `import` did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Imported {
    /// Letters parked (a msg_id on several lines counts once).
    letters: usize,
    /// Of those, how many are resolved.
    resolved: usize,
    /// Letters the store had already.
    there: usize,
    /// Complete lines that could not be read.
    unreadable: usize,
}

/// `import FILE --into STORE`: the letters of the JSONL file that the store does not have yet,
/// parked (and resolved, for an old file's ack lines) as the service would have.
pub(crate) async fn import(file: &Path, into: &str, out: &mut impl Write) -> Result<u8, Failure> {
    existing_file(
        file,
        "dead-letter file",
        "import reads the file a JsonlSink writes",
    )?;
    let reader = JsonlReader::open(file).map_err(Failure::Store)?;
    let postgres = into.starts_with("postgres://") || into.starts_with("postgresql://");
    let imported = if postgres {
        import_into_pg(reader, into).await?
    } else {
        let target = SqliteDeadLetters::open(into).map_err(Failure::Store)?;
        import_lines(reader, &target).await?
    };
    let resolved = match imported.resolved {
        0 => String::new(),
        n => format!(", {n} of them resolved"),
    };
    writeln!(
        out,
        "imported {} letter{} from {} into {}{resolved}; {} already there",
        imported.letters,
        if imported.letters == 1 { "" } else { "s" },
        file.display(),
        without_credentials(into),
        imported.there
    )?;
    if imported.unreadable == 0 {
        return Ok(EXIT_OK);
    }
    out.flush()?;
    eprintln!(
        "retry-dlq: warning: {}: {} line{} could not be read and {} not imported (see above); \
         the file keeps {}",
        file.display(),
        imported.unreadable,
        if imported.unreadable == 1 { "" } else { "s" },
        if imported.unreadable == 1 {
            "was"
        } else {
            "were"
        },
        if imported.unreadable == 1 {
            "it"
        } else {
            "them"
        },
    );
    Ok(EXIT_FLAGGED)
}

#[cfg(feature = "postgres")]
async fn import_into_pg(reader: JsonlReader, url: &str) -> Result<Imported, Failure> {
    let target = retry_postgres::PgDeadLetters::connect(url)
        .await
        .map_err(Failure::Store)?;
    import_lines(reader, &target).await
}

#[cfg(not(feature = "postgres"))]
async fn import_into_pg(_: JsonlReader, _: &str) -> Result<Imported, Failure> {
    Err(Failure::Usage(
        "this retry-dlq was built without PostgreSQL support (cargo feature `postgres`); \
         import into a SQLite file, or build with --features postgres"
            .to_owned(),
    ))
}

/// Parks each letter line of `reader` in `target`, and resolves it for each ack line, unless
/// `target` had its msg_id before (asked at the first line of each msg_id). A line at a time:
/// only the msg_ids seen are kept. Lines that cannot be read, and a torn last line, are said on
/// stderr.
async fn import_lines<T: DeadLetterStore>(
    reader: JsonlReader,
    target: &T,
) -> Result<Imported, Failure> {
    let file = reader.path().to_path_buf();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    let mut unreadable = 0;
    for line in reader {
        match line.map_err(Failure::Store)? {
            JsonlLine::Letter(letter) => {
                let before = seen.get(&letter.msg_id).copied();
                if before == Some(Seen::There) {
                    continue;
                }
                if before.is_none() && has(target, &letter.msg_id).await? {
                    seen.insert(letter.msg_id, Seen::There);
                    continue;
                }
                target.park(&letter).await.map_err(Failure::Store)?;
                // Parked again, a letter is merged and pending; parked first, it is as it came.
                let now = if before.is_none() && !letter.is_pending() {
                    Seen::Resolved
                } else {
                    Seen::Pending
                };
                seen.insert(letter.msg_id, now);
            }
            JsonlLine::Resolved { msg_id, resolution } => match seen.get(&msg_id).copied() {
                Some(Seen::There) => {}
                Some(_) => {
                    if target
                        .resolve(&msg_id, &resolution)
                        .await
                        .map_err(Failure::Store)?
                    {
                        seen.insert(msg_id, Seen::Resolved);
                    }
                }
                // An ack with no letter before it in the file: nothing to resolve here. (The
                // store may have the letter: then its later lines are skipped.)
                None => {
                    if has(target, &msg_id).await? {
                        seen.insert(msg_id, Seen::There);
                    }
                }
            },
            JsonlLine::Unreadable(bad) => {
                unreadable += 1;
                eprintln!(
                    "retry-dlq: warning: {}: line {} could not be read and was not imported: \
                     {}: {}",
                    file.display(),
                    bad.line,
                    report::truncate(&report::one_line(&bad.why), 200),
                    report::truncate(&report::one_line(&bad.text), 200)
                );
            }
            JsonlLine::Torn(torn) => {
                eprintln!(
                    "retry-dlq: warning: {}: the last line (at byte {}) has no newline yet and \
                     was not imported: a letter still being written, which a later import \
                     takes, or one a crash cut short, never parked, which its writer moves to \
                     {}.torn: {}",
                    file.display(),
                    torn.offset,
                    file.display(),
                    report::truncate(&report::one_line(&torn.text), 200)
                );
            }
        }
    }
    let mut imported = Imported {
        unreadable,
        ..Imported::default()
    };
    for state in seen.values() {
        match state {
            Seen::There => imported.there += 1,
            Seen::Pending => imported.letters += 1,
            Seen::Resolved => {
                imported.letters += 1;
                imported.resolved += 1;
            }
        }
    }
    Ok(imported)
}

/// Whether `store` has a letter `msg_id`, pending or resolved.
async fn has<T: DeadLetterStore>(store: &T, msg_id: &str) -> Result<bool, Failure> {
    let letter = store.get(msg_id).await.map_err(Failure::Store)?;
    Ok(letter.is_some())
}

/// `into` as `import` prints it: a URL without its user, password, query and fragment (which
/// may hold a password too).
fn without_credentials(into: &str) -> String {
    let Some((scheme, rest)) = into.split_once("://") else {
        return into.to_owned();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_url_is_printed_without_credentials() {
        for (url, shown) in [
            ("dlq.sqlite", "dlq.sqlite"),
            (
                "postgres://app:s3cret@db:5432/dlq?sslmode=require&password=p4ss",
                "postgres://db:5432/dlq",
            ),
            ("postgresql://db/dlq#x", "postgresql://db/dlq"),
            ("postgres://a:b@c@db", "postgres://db"),
        ] {
            assert_eq!(without_credentials(url), shown);
        }
    }
}
