//! Idempotency keys under bad input, through the public API: the encoding is injective on
//! random tuples (strings full of the encoding's own separators included), scopes never share a
//! key, and a key longer than the store's limit is refused with `KeyTooLong` before anything
//! runs or is stored, on `MemoryStore` and on a `SqliteStore` file.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use proptest::prelude::*;
use retry_core::idempotency::{
    IdempotencyError, Limits, MemoryStore, encode_key, encode_scoped_key,
};
use retry_core::idempotent;
use retry_sqlite::SqliteStore;

use crate::tempdir;

use tempdir::TempDir;

use crate::runtime;

use runtime::RUNTIME;

/// Strings made mostly of what the encoding itself writes (`s`, `n`, digits, `:`, `,`, `@`, `/`,
/// the option tags), so that a forged separator is likely, plus any text now and then.
fn tricky() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[sn0-9:,@/oz]{0,8}",
        1 => ".{0,8}",
    ]
}

/// Integers small enough to collide with digits in the strings, and any.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..20, any::<u64>()]
}

/// `(a, b)` and, where there is one, another pair whose parts joined by `sep` give the same
/// text: `("a:", "b")` and `("a", ":b")`. An encoding that only joins its parts, with or
/// without a separator that may occur inside them, cannot tell the two apart.
fn split_elsewhere(
    a: String,
    b: String,
    sep: &str,
    at: prop::sample::Index,
) -> [(String, String); 2] {
    let joined = format!("{a}{sep}{b}");
    let cuts: Vec<usize> = (0..=joined.len())
        .filter(|&i| joined.is_char_boundary(i) && joined[i..].starts_with(sep))
        .filter(|&i| joined.is_char_boundary(i + sep.len()))
        .collect();
    let cut = cuts[at.index(cuts.len())];
    let other = (
        joined[..cut].to_owned(),
        joined[cut + sep.len()..].to_owned(),
    );
    [(a, b), other]
}

/// The encoding's own separators, and none.
fn separator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![",", ":", ""])
}

/// String pairs, each beside a pair with the same joined text.
fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(
        (
            tricky(),
            tricky(),
            separator(),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(a, b, sep, at)| split_elsewhere(a, b, sep, at)),
        1..12,
    )
    .prop_map(|groups| groups.into_iter().flatten().collect())
}

/// `(String, u64)` tuples, each beside one with the same joined text where the digits allow:
/// `("x1", 23)` and `("x", 123)`.
fn string_and_number_tuples() -> impl Strategy<Value = Vec<(String, u64)>> {
    prop::collection::vec(
        (
            tricky(),
            number(),
            separator(),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(a, n, sep, at)| {
                let [first, (head, tail)] = split_elsewhere(a, n.to_string(), sep, at);
                let first = (first.0, n);
                match tail.parse::<u64>() {
                    Ok(m) if tail.bytes().all(|b| b.is_ascii_digit()) => vec![first, (head, m)],
                    _ => vec![first],
                }
            }),
        1..12,
    )
    .prop_map(|groups| groups.into_iter().flatten().collect())
}

/// Keys of several shapes: distinct values must never share an encoding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    StrInt(String, u64),
    StrStr(String, String),
    Three(String, String, String),
    OptInt(Option<String>, i64),
    Str(String),
}

impl Key {
    fn encode(&self) -> String {
        match self {
            Key::StrInt(a, n) => encode_key(&(a, n)),
            Key::StrStr(a, b) => encode_key(&(a, b)),
            Key::Three(a, b, c) => encode_key(&(a, b, c)),
            Key::OptInt(a, n) => encode_key(&(a, n)),
            Key::Str(a) => encode_key(a),
        }
    }
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        (tricky(), number()).prop_map(|(a, n)| Key::StrInt(a, n)),
        (tricky(), tricky()).prop_map(|(a, b)| Key::StrStr(a, b)),
        (tricky(), tricky(), tricky()).prop_map(|(a, b, c)| Key::Three(a, b, c)),
        (proptest::option::of(tricky()), any::<i64>()).prop_map(|(a, n)| Key::OptInt(a, n)),
        tricky().prop_map(Key::Str),
    ]
}

/// The first two values of `values` that share an encoding, if any.
fn collision<T: PartialEq + Clone>(
    values: impl IntoIterator<Item = (String, T)>,
) -> Option<(String, T, T)> {
    let mut seen: HashMap<String, T> = HashMap::new();
    for (encoded, value) in values {
        match seen.get(&encoded) {
            Some(earlier) if *earlier != value => return Some((encoded, earlier.clone(), value)),
            Some(_) => {}
            None => {
                seen.insert(encoded, value);
            }
        }
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// `(String, u64)`: different tuples, different keys, separators in the strings or not.
    #[test]
    fn string_and_integer_tuples_encode_injectively(tuples in string_and_number_tuples()) {
        let found = collision(tuples.into_iter().map(|t| (encode_key(&t), t)));
        prop_assert!(found.is_none(), "two tuples share a key: {:?}", found);
    }

    /// `(String, String)`: `("a:b", "c")` and `("a", "b:c")` and every random variation.
    #[test]
    fn string_pairs_encode_injectively(pairs in pairs()) {
        let found = collision(pairs.into_iter().map(|t| (encode_key(&t), t)));
        prop_assert!(found.is_none(), "two pairs share a key: {:?}", found);
    }

    /// Keys of different shapes (arity, strings or integers, options) never meet either.
    #[test]
    fn keys_of_any_shape_encode_injectively(keys in prop::collection::vec(key(), 2..32)) {
        let found = collision(keys.into_iter().map(|k| (k.encode(), k)));
        prop_assert!(found.is_none(), "two keys share an encoding: {:?}", found);
    }

    /// A scope is part of the key: the same key in two scopes is two keys, every (scope, key)
    /// pair is its own key, and no scoped key equals an unscoped one.
    #[test]
    fn scopes_separate_keys(
        scoped in prop::collection::vec((tricky(), key()), 2..24),
        unscoped in prop::collection::vec(key(), 1..8),
        other_scope in tricky(),
    ) {
        let encode = |scope: &str, key: &Key| match key {
            Key::StrInt(a, n) => encode_scoped_key(scope, &(a, n)),
            Key::StrStr(a, b) => encode_scoped_key(scope, &(a, b)),
            Key::Three(a, b, c) => encode_scoped_key(scope, &(a, b, c)),
            Key::OptInt(a, n) => encode_scoped_key(scope, &(a, n)),
            Key::Str(a) => encode_scoped_key(scope, a),
        };
        let found = collision(scoped.iter().map(|(scope, key)| (encode(scope, key), (scope.clone(), key.clone()))));
        prop_assert!(found.is_none(), "two scoped keys share an encoding: {:?}", found);
        for (scope, key) in &scoped {
            if *scope != other_scope {
                prop_assert_ne!(encode(scope, key), encode(&other_scope, key));
            }
            for plain in &unscoped {
                prop_assert_ne!(encode(scope, key), plain.encode());
            }
        }
    }
}

#[derive(Debug)]
struct Rejected(IdempotencyError);

impl From<IdempotencyError> for Rejected {
    fn from(e: IdempotencyError) -> Self {
        Rejected(e)
    }
}

#[idempotent(key = id, store = inbox)]
async fn in_memory(inbox: &MemoryStore, id: String, runs: &AtomicU32) -> Result<u32, Rejected> {
    Ok(runs.fetch_add(1, Ordering::SeqCst))
}

#[idempotent(key = id, store = inbox)]
async fn in_sqlite(inbox: &SqliteStore, id: String, runs: &AtomicU32) -> Result<u32, Rejected> {
    Ok(runs.fetch_add(1, Ordering::SeqCst))
}

/// The default limit on an encoded key.
const MAX_KEY: usize = 512;

/// The stored length of a string key of `function`: `~`, the namespace as a string part, then
/// `s<len>:` and the text.
fn encoded_len(function: &str, id: &str) -> usize {
    let namespace = 1 + function.len().to_string().len() + 2 + function.len();
    namespace + id.len() + id.len().to_string().len() + 2
}

/// What a key that is too long must give: `KeyTooLong` naming both sizes, in a message.
fn assert_too_long(result: Result<u32, Rejected>, len: usize) -> Result<(), TestCaseError> {
    match result {
        Err(Rejected(IdempotencyError::KeyTooLong { len: got, max })) => {
            prop_assert_eq!((got, max), (len, MAX_KEY));
            let message = IdempotencyError::KeyTooLong { len, max }.to_string();
            prop_assert_eq!(
                message,
                format!("idempotency key is {len} bytes, more than the {MAX_KEY} allowed")
            );
            Ok(())
        }
        other => Err(TestCaseError::fail(format!(
            "a {len}-byte key gave {other:?}"
        ))),
    }
}

/// Rows in the store's table, read beside the store.
fn rows(path: &std::path::Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM inbox_log", [], |row| row.get(0))
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Around the limit, and far past it: a key up to the limit runs once; a longer one is
    /// `KeyTooLong` with its length, the body does not run and nothing is stored.
    #[test]
    fn oversize_keys_are_refused_before_anything_runs_in_memory(
        id in prop_oneof!["[a-z]{495,515}", ".{100,200}", "[a-z]{2000,3000}"],
    ) {
        let inbox = MemoryStore::new();
        let runs = AtomicU32::new(0);
        let len = encoded_len("in_memory", &id);
        let result = RUNTIME.block_on(in_memory(&inbox, id, &runs));
        if len <= MAX_KEY {
            prop_assert!(result.is_ok(), "a {}-byte key gave {:?}", len, result);
            prop_assert_eq!((runs.load(Ordering::SeqCst), inbox.len()), (1, 1));
        } else {
            assert_too_long(result, len)?;
            prop_assert_eq!((runs.load(Ordering::SeqCst), inbox.len()), (0, 0), "nothing ran or was kept");
        }
    }
}

#[test]
fn oversize_keys_are_refused_before_anything_runs_in_sqlite() {
    let dir = TempDir::new("key-props-sqlite");
    let path = dir.file("inbox.sqlite3");
    let inbox = SqliteStore::open(&path).unwrap();
    assert_eq!(inbox_limits(&inbox), Limits::default());
    let runs = AtomicU32::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(32));
    runner
        .run(&prop_oneof!["[a-z]{495,515}", "[a-z]{4000,5000}"], |id| {
            let (runs_before, rows_before) = (runs.load(Ordering::SeqCst), rows(&path));
            let len = encoded_len("in_sqlite", &id);
            let result = RUNTIME.block_on(in_sqlite(&inbox, id, &runs));
            let (ran, stored) = (
                runs.load(Ordering::SeqCst) - runs_before,
                rows(&path) - rows_before,
            );
            if len <= MAX_KEY {
                prop_assert!(result.is_ok(), "a {}-byte key gave {:?}", len, result);
                prop_assert_eq!((ran, stored), (1, 1));
            } else {
                assert_too_long(result, len)?;
                prop_assert_eq!((ran, stored), (0, 0), "nothing ran or was kept");
            }
            Ok(())
        })
        .unwrap();
}

fn inbox_limits(store: &SqliteStore) -> Limits {
    retry_core::idempotency::IdempotencyStore::limits(store)
}

/// A megabyte of key is refused as quickly as one byte too many, and says how long it was.
#[test]
fn a_megabyte_key_is_refused_with_its_length() {
    let inbox = MemoryStore::new();
    let runs = AtomicU32::new(0);
    let id = "k".repeat(1 << 20);
    let len = encoded_len("in_memory", &id);
    let result = RUNTIME.block_on(in_memory(&inbox, id, &runs));
    assert_too_long(result, len).unwrap();
    assert_eq!((runs.load(Ordering::SeqCst), inbox.len()), (0, 0));
}
