//! `SqliteDeadLetters` on a file of 1,000,000 letters: `stats` answers in under a second and a
//! process that opens the file and asks for them stays under 50 MB (counts are SQL over
//! indexes, no letter is loaded), and a page deep into the order is a range scan that answers
//! at once.
//!
//! The file is built directly through rusqlite (a prepared insert in a few big transactions,
//! `synchronous=OFF`), not through `park`: the point is the reads. The measuring is done by
//! this test binary run again as a child (`RETRY_CORE_DLQ_MILLION_CHILD=<file>`), which opens
//! the file, calls `stats` and a deep `page`, and prints the times and its own peak RSS
//! (`VmHWM` in `/proc/self/status`), so the building does not count.
#![cfg(feature = "sqlite")]

use std::process::Stdio;
use std::time::{Duration, Instant};

use retry_core::dlq::{DeadLetterStore, FailureClass, Page};
use retry_sqlite::SqliteDeadLetters;

#[path = "common/child.rs"]
mod child;
#[path = "common/tempdir.rs"]
mod tempdir;

use tempdir::TempDir;

const CHILD_ENV: &str = "RETRY_CORE_DLQ_MILLION_CHILD";
const TEST: &str = "stats_on_a_million_letters_take_under_a_second_and_50_mb";

const LETTERS: u32 = 1_000_000;
/// Every 10th letter is resolved, every 100th pending one leased, every 3rd is of class data.
const RESOLVED_EVERY: u32 = 10;
const LEASED_EVERY: u32 = 100;
const DATA_EVERY: u32 = 3;

const STATS_LIMIT: Duration = Duration::from_secs(1);
const RSS_LIMIT_KB: u64 = 50 * 1024;

#[test]
fn stats_on_a_million_letters_take_under_a_second_and_50_mb() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        return measure(&path);
    }
    let dir = TempDir::new("dlq-million");
    let path = dir.file("dlq.sqlite3");
    let built = Instant::now();
    build(&path);
    let built = built.elapsed();
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());

    let (mut child, lines) = child::rerun(TEST, CHILD_ENV, &path, Stdio::null());
    let mut figures = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(60)) {
        if let Some(figure) = line.strip_prefix("FIGURE ") {
            figures.push(figure.to_owned());
        }
        if line.ends_with("DONE") {
            break;
        }
    }
    assert!(
        child.wait().unwrap().success(),
        "the measuring child failed"
    );
    let figure = |name: &str| -> u64 {
        figures
            .iter()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("the child reported no {name}: {figures:?}"))
            .parse()
            .unwrap()
    };
    let (stats_us, page_us, rss_kb) = (figure("stats_us"), figure("page_us"), figure("rss_kb"));
    eprintln!(
        "1,000,000 letters ({} MB file, built in {built:.1?}): stats {} ms, deep page {} µs, \
         peak RSS {} MB",
        size / 1_000_000,
        stats_us / 1000,
        page_us,
        rss_kb / 1024
    );
    assert!(
        Duration::from_micros(stats_us) < STATS_LIMIT,
        "stats took {stats_us} µs"
    );
    assert!(
        Duration::from_micros(page_us) < Duration::from_millis(100),
        "a page deep into the order took {page_us} µs: not a range scan"
    );
    assert!(rss_kb < RSS_LIMIT_KB, "the process peaked at {rss_kb} kB");
}

/// The child: open, stats (checked against what [`build`] wrote), a deep page; figures out.
fn measure(path: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let letters = SqliteDeadLetters::open(path).unwrap();
    runtime.block_on(async {
        let started = Instant::now();
        let stats = letters.stats().await.unwrap();
        let stats_us = started.elapsed().as_micros();
        let resolved = u64::from(LETTERS / RESOLVED_EVERY);
        let pending = u64::from(LETTERS) - resolved;
        assert_eq!(
            (stats.pending, stats.resolved),
            (pending, resolved),
            "{stats:?}"
        );
        assert_eq!(stats.system + stats.data, pending);
        assert_eq!(
            stats.data,
            (0..LETTERS)
                .filter(|i| i % RESOLVED_EVERY != 0 && i % DATA_EVERY == 0)
                .count() as u64
        );
        assert_eq!(
            stats.leased,
            (0..LETTERS)
                .filter(|i| i % RESOLVED_EVERY != 0 && i % LEASED_EVERY == 1)
                .count() as u64
        );
        assert_eq!(
            stats.oldest_first_failed_at,
            retry_core::time::parse_rfc3339(&first_failed_at(1))
        );

        // The 10 letters of class data after the 900,000th: a range scan of the class index.
        let mut deep = Page::first(10).class(FailureClass::Data);
        deep.after = Some(retry_core::dlq::Cursor {
            first_failed_at: retry_core::time::parse_rfc3339(&first_failed_at(900_000)).unwrap(),
            msg_id: msg_id(900_000),
        });
        let started = Instant::now();
        let page = letters.page(&deep).await.unwrap();
        let page_us = started.elapsed().as_micros();
        let ids: Vec<String> = page.into_iter().map(|l| l.msg_id).collect();
        let expected: Vec<String> = (900_001..)
            .filter(|i| i % RESOLVED_EVERY != 0 && i % DATA_EVERY == 0)
            .take(10)
            .map(msg_id)
            .collect();
        assert_eq!(ids, expected);

        println!("FIGURE stats_us={stats_us}");
        println!("FIGURE page_us={page_us}");
    });
    println!("FIGURE rss_kb={}", peak_rss_kb());
    println!("DONE");
}

/// This process's peak resident set (`VmHWM`), in kB.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

fn msg_id(i: u32) -> String {
    format!("M-{i:07}")
}

/// One letter a second from 2026-01-01, every other one written with a +09:00 offset.
fn first_failed_at(i: u32) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_secs(1_767_225_600 + u64::from(i));
    let utc = retry_core::time::format_rfc3339(at);
    if i.is_multiple_of(2) {
        utc
    } else {
        let nine = retry_core::time::format_rfc3339(at + Duration::from_secs(9 * 3600));
        nine.replace("+00:00", "+09:00")
    }
}

/// Writes the letters through rusqlite, into the tables `SqliteDeadLetters::open` creates. The
/// indexes of `dead_letters` are dropped first and created by opening the store again (which
/// creates what is missing), as building an index at once is faster than keeping it up to date
/// row by row.
fn build(path: &std::path::Path) {
    drop(SqliteDeadLetters::open(path).unwrap());
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "synchronous", "OFF").unwrap();
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_schema \
             WHERE type = 'index' AND tbl_name = 'dead_letters' AND sql IS NOT NULL",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes.len(), 5, "{indexes:?}");
    for index in indexes {
        conn.execute_batch(&format!("DROP INDEX {index}")).unwrap();
    }
    let lease_until =
        retry_core::time::format_utc(std::time::SystemTime::now() + Duration::from_secs(3600));
    let original = serde_json::json!({"amount": 10, "to": "DE89370400440532013000"}).to_string();
    for chunk in (0..LETTERS).collect::<Vec<_>>().chunks(50_000) {
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx
                .prepare(
                    "INSERT INTO dead_letters (msg_id, original, reason, attempts, \
                     first_failed_at, last_failed_at, trace_id, class, error_type, parked_at, \
                     first_failed_utc, source, resolved_at, resolved_by, resolved_utc, \
                     lease_run, lease_until) \
                     VALUES (?1, ?2, 'gave up after 5 attempts: 503', 5, ?3, ?3, 't', ?4, 'E', \
                     ?5, ?5, 'payments::deposit', ?6, ?7, ?6, ?8, ?9)",
                )
                .unwrap();
            for &i in chunk {
                let at = first_failed_at(i);
                let utc =
                    retry_core::time::format_utc(retry_core::time::parse_rfc3339(&at).unwrap());
                let resolved = (i % RESOLVED_EVERY == 0).then(|| utc.clone());
                let leased = i % RESOLVED_EVERY != 0 && i % LEASED_EVERY == 1;
                insert
                    .execute(rusqlite::params![
                        msg_id(i),
                        original,
                        at,
                        if i % DATA_EVERY == 0 {
                            "data"
                        } else {
                            "system"
                        },
                        utc,
                        resolved,
                        resolved.as_ref().map(|_| "alice"),
                        leased.then_some("run-a"),
                        leased.then_some(lease_until.as_str()),
                    ])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    drop(conn);
    drop(SqliteDeadLetters::open(path).unwrap());
}
