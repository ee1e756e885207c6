//! PostgreSQL over TLS, as the connection string asks for it (feature `postgres-tls`).
//!
//! `PgStore` and `PgDeadLetters` with `sslmode=require` work against the cluster scripts/test
//! started, once this test has given it a certificate (made here with `openssl`, signed by a CA
//! of the test's own) and turned `ssl` on; `sslmode=verify-full` works with that CA as
//! `sslrootcert`, and refuses a name the certificate does not have, which `verify-ca` (and
//! `require` with a root file) let through; every mode that checks the chain refuses another CA. Before that, with `ssl` off, `sslmode=require`
//! fails saying the server has no TLS. A guard turns `ssl` back to the cluster's default at the
//! end, pass or fail, since the other PostgreSQL test binaries of the run use the cluster after
//! this one.
//!
//! It needs the cluster's data directory (`RETRY_CORE_PG_DATA`, as scripts/test exports it, to
//! put the certificate where the server may read it) and `DATABASE_URL`; without them it fails,
//! saying so. Keep the cluster test the only one of this binary that touches `ssl`: the tests of
//! one binary run at the same time.
#![cfg(feature = "postgres-tls")]

#[path = "common/no_tls_server.rs"]
mod no_tls_server;
use crate::pg;
use crate::tempdir;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use retry_core::dlq::{DeadLetter, DeadLetterSink as _, DeadLetterStore as _};
use retry_core::error_chain;
use retry_core::idempotency::{ClaimOutcome, ClaimRequest, IdempotencyStore as _};
use retry_postgres::PgDeadLetters;
use retry_postgres::PgStore;
use tempdir::TempDir;

/// `url` with `key=value` added to its query.
fn with(url: &str, setting: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{setting}")
}

/// Without a server: a "server" that answers `N` to the TLS request.
#[tokio::test]
async fn require_against_a_server_without_tls_fails_saying_so() {
    let port = no_tls_server::no_tls_server();
    let url = format!("postgres://app:s3cret@127.0.0.1:{port}/payments?sslmode=require");
    let store = PgStore::connect(&url).await.unwrap_err();
    let letters = PgDeadLetters::connect(&url).await.unwrap_err();
    for chain in [
        error_chain(&store).to_string(),
        error_chain(&letters).to_string(),
    ] {
        assert!(chain.contains("server does not support TLS"), "{chain}");
        assert!(chain.contains(&format!("127.0.0.1:{port}")), "{chain}");
        assert!(!chain.contains("s3cret"), "{chain}");
    }
}

/// A root file that is not there is refused before any connection, naming it.
#[tokio::test]
async fn a_missing_root_file_is_named() {
    let url = "postgres://app:s3cret@127.0.0.1:1/payments?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
    let chain = error_chain(&PgStore::connect(url).await.unwrap_err()).to_string();
    assert!(
        chain.contains("sslrootcert=/nonexistent/ca.pem: cannot read"),
        "{chain}"
    );
    assert!(!chain.contains("s3cret"), "{chain}");
}

// ---- the cluster, with a certificate ----

/// The certificates this test makes: a CA, a server certificate it signed for `127.0.0.1` and
/// `localhost`, and another CA that signed nothing here.
struct Certificates {
    dir: TempDir,
}

impl Certificates {
    fn make() -> Self {
        let dir = TempDir::new("pg-tls");
        let ext = dir.file("server.ext");
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            openssl(
                &dir.0,
                &[
                    &["req", "-x509"][..],
                    &ec,
                    &["-days", "2", "-subj", &format!("/CN=retry-core test {ca}")],
                    &[
                        "-keyout",
                        &format!("{ca}.key"),
                        "-out",
                        &format!("{ca}.pem"),
                    ],
                ]
                .concat(),
            );
        }
        openssl(
            &dir.0,
            &[
                &["req"][..],
                &ec,
                &[
                    "-subj",
                    "/CN=localhost",
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                ],
            ]
            .concat(),
        );
        openssl(
            &dir.0,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
        );
        Certificates { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.file(name)
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("tests/pg_tls.rs makes its certificates with `openssl`: {e}"));
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The cluster's data directory, from scripts/test.
fn data_directory() -> PathBuf {
    match std::env::var("RETRY_CORE_PG_DATA") {
        Ok(dir) if !dir.trim().is_empty() => PathBuf::from(dir),
        _ => panic!(
            "tests/pg_tls.rs turns TLS on in the PostgreSQL cluster scripts/test starts and needs \
             its data directory, RETRY_CORE_PG_DATA, which scripts/test exports (with \
             DATABASE_URL): run it through scripts/test"
        ),
    }
}

/// Copies the server's certificate and key into the data directory, owned by the server's
/// user (the data directory's owner) and, for the key, readable by it alone, as PostgreSQL
/// insists.
fn install(certificates: &Certificates, data: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let owner = std::fs::metadata(data)
        .unwrap_or_else(|e| panic!("RETRY_CORE_PG_DATA={}: {e}", data.display()));
    let mut installed = Vec::new();
    for (from, to, mode) in [
        ("server.pem", "retry_core_test_server.crt", 0o644),
        ("server.key", "retry_core_test_server.key", 0o600),
    ] {
        let to = data.join(to);
        std::fs::copy(certificates.file(from), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&to, Some(owner.uid()), Some(owner.gid())).unwrap_or_else(|e| {
            panic!(
                "{} must belong to the server's user (uid {}): {e}; scripts/test runs as root",
                to.display(),
                owner.uid()
            )
        });
        installed.push(to);
    }
    (installed.remove(0), installed.remove(0))
}

/// Sets `ssl` (and the files) with `ALTER SYSTEM` and reloads the configuration.
async fn set_ssl(on: bool, files: Option<(&Path, &Path)>) {
    let admin = pg::raw_client(&pg::database_url()).await;
    // One statement at a time: ALTER SYSTEM refuses to run in a transaction block, which a
    // batch of statements is.
    let mut statements = Vec::new();
    if let Some((cert, key)) = files {
        statements.push(format!(
            "ALTER SYSTEM SET ssl_cert_file = '{}'",
            cert.display()
        ));
        statements.push(format!(
            "ALTER SYSTEM SET ssl_key_file = '{}'",
            key.display()
        ));
    }
    statements.push(format!(
        "ALTER SYSTEM SET ssl = {}",
        if on { "on" } else { "off" }
    ));
    statements.push("SELECT pg_reload_conf()".to_owned());
    for statement in &statements {
        admin.batch_execute(statement).await.unwrap();
    }
}

/// Puts `ssl` and its files back to the cluster's own settings, pass or fail, and removes the
/// copies of the certificate and key from the data directory.
struct ResetSsl(PathBuf);

impl Drop for ResetSsl {
    fn drop(&mut self) {
        for file in ["retry_core_test_server.crt", "retry_core_test_server.key"] {
            let _ = std::fs::remove_file(self.0.join(file));
        }
        // A runtime of its own: this may run while the test's runtime unwinds.
        let reset = std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let admin = pg::raw_client(&pg::database_url()).await;
                    for statement in [
                        "ALTER SYSTEM RESET ssl",
                        "ALTER SYSTEM RESET ssl_cert_file",
                        "ALTER SYSTEM RESET ssl_key_file",
                        "SELECT pg_reload_conf()",
                    ] {
                        admin.batch_execute(statement).await?;
                    }
                    Ok::<(), tokio_postgres::Error>(())
                })
        });
        if let Ok(Err(e)) = reset.join() {
            eprintln!("tests/pg_tls.rs could not turn ssl back off: {e}");
        }
    }
}

/// Connects `PgStore` at `url` until it works (the reload reaches new connections within a
/// moment), failing with the last error after 10 s.
async fn store_once_reloaded(url: &str) -> PgStore {
    let started = Instant::now();
    loop {
        match PgStore::connect(url).await {
            Ok(store) => return store,
            Err(e) if started.elapsed() > Duration::from_secs(10) => panic!(
                "PgStore with {url:?} did not connect within 10 s of turning TLS on (the server's \
                 log, beside its data directory, says why it refused the certificate): {}",
                error_chain(&e)
            ),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Whether a connection of `pool` is TLS, as the server says of that very session.
async fn encrypted(pool: &deadpool_postgres::Pool) -> bool {
    let client = pool.get().await.unwrap();
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

fn letter(msg_id: &str) -> DeadLetter {
    serde_json::from_value(serde_json::json!({
        "msg_id": msg_id, "original": {"amount": 10}, "reason": "upstream 503 after 5 attempts",
        "attempts": 5, "first_failed_at": "2026-08-19T02:11:03+09:00",
        "last_failed_at": "2026-08-19T02:12:47+09:00", "trace_id": "a1b2c3d4",
        "class": "system", "error_type": "FetchError"
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_stores_work_over_tls_when_the_url_requires_it() {
    let data = data_directory();
    let certificates = Certificates::make();
    let schema = pg::Schema::new("tls").await;
    let _reset = ResetSsl(data.clone());

    // `ssl` off: `require` is refused, saying why.
    set_ssl(false, None).await;
    let required = with(&schema.url, "sslmode=require");
    let started = Instant::now();
    let refused = loop {
        match PgStore::connect(&required).await {
            Err(e) => break error_chain(&e).to_string(),
            Ok(_) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(_) => panic!("sslmode=require connected to a server with ssl = off"),
        }
    };
    assert!(refused.contains("server does not support TLS"), "{refused}");

    // `ssl` on, with the test's certificate.
    let (cert, key) = install(&certificates, &data);
    set_ssl(true, Some((&cert, &key))).await;

    let store = store_once_reloaded(&required).await;
    let request = ClaimRequest {
        key: "tls:k-1",
        biz_key: "k-1",
        fingerprint: None,
        lease: Duration::from_secs(30),
        retention: Duration::from_secs(3600),
    };
    let ClaimOutcome::Claimed(claim) = store.claim(&request).await.unwrap() else {
        panic!("a new key must be claimed");
    };
    store.complete(&claim, "\"ok\"").await.unwrap();
    assert_eq!(
        store.claim(&request).await.unwrap(),
        ClaimOutcome::Done("\"ok\"".into())
    );
    assert!(
        encrypted(store.pool()).await,
        "the store's connection is not encrypted"
    );

    let letters = PgDeadLetters::connect(&required).await.unwrap();
    letters.park(&letter("M-tls")).await.unwrap();
    let parked = letters
        .get("M-tls")
        .await
        .unwrap()
        .expect("the letter was parked");
    assert_eq!(parked.original, letter("M-tls").original);
    assert!(
        encrypted(letters.pool()).await,
        "the dead letters' connection is not encrypted"
    );

    // `verify-full`: the chain to the test's CA and the name (127.0.0.1, in the certificate).
    let root = |ca: &str| certificates.file(ca).display().to_string();
    let verified = with(
        &with(&schema.url, "sslmode=verify-full"),
        &format!("sslrootcert={}", root("ca.pem")),
    );
    PgStore::connect(&verified).await.unwrap();
    PgDeadLetters::connect(&verified).await.unwrap();
    // Reached under a name the certificate does not have (the address given apart, as
    // `hostaddr`): `verify-full` refuses it, `verify-ca` checks the chain alone and goes on.
    let url = |mode: &str, ca: &str| {
        let renamed = schema.url.replacen("@127.0.0.1:", "@db.invalid:", 1);
        assert_ne!(
            renamed, schema.url,
            "scripts/test's DATABASE_URL names 127.0.0.1"
        );
        let renamed = with(&renamed, "hostaddr=127.0.0.1");
        with(
            &with(&renamed, &format!("sslmode={mode}")),
            &format!("sslrootcert={}", root(ca)),
        )
    };
    let chain = error_chain(
        &PgStore::connect(&url("verify-full", "ca.pem"))
            .await
            .unwrap_err(),
    )
    .to_string();
    assert!(chain.contains("invalid peer certificate"), "{chain}");
    assert!(
        chain.contains("not valid for name \"db.invalid\""),
        "{chain}"
    );
    PgStore::connect(&url("verify-ca", "ca.pem")).await.unwrap();
    PgStore::connect(&url("require", "ca.pem")).await.unwrap();
    // Another CA vouches for nothing here, whatever the mode that checks the chain.
    for mode in ["verify-full", "verify-ca", "require"] {
        let chain = error_chain(
            &PgStore::connect(&url(mode, "other-ca.pem"))
                .await
                .unwrap_err(),
        )
        .to_string();
        assert!(
            chain.contains("invalid peer certificate") && chain.contains("UnknownIssuer"),
            "{mode}: {chain}"
        );
    }

    drop((store, letters));
    schema.drop_all().await;
}
