//! `cargo run --features postgres --example postgres_setup` against the test server, in a schema
//! of its own: the five tables are there, the idempotent call ran its body once and stored the
//! response, the letter is pending in `dead_letters`. Without `DATABASE_URL` the example says
//! what to set and exits with status 2.
#![cfg(feature = "postgres")]

use crate::example;
use crate::pg;

#[tokio::test]
async fn creates_the_tables_runs_one_idempotent_call_and_parks_one_letter() {
    let schema = pg::Schema::new("pg_setup").await;
    let output = example::command("postgres_setup", &[])
        .env("DATABASE_URL", &schema.url)
        .output()
        .expect("cargo runs");
    let stdout = example::success("postgres_setup", output);

    assert!(
        stdout.contains(&format!(", schema {}\n", schema.name)),
        "{stdout}"
    );
    for table in [
        "retry_core_schema",
        "inbox_log",
        "dead_letters",
        "dead_letter_redrives",
        "dead_letter_audit",
    ] {
        assert!(
            stdout.lines().any(|l| l.trim_start().starts_with(table)),
            "{table} not listed:\n{stdout}"
        );
    }
    let line = |label: &str| -> &str {
        stdout
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label:?} in\n{stdout}"))
            .trim()
    };
    assert_eq!(line("body ran"), "1 time(s)");
    let first = line("first answer");
    assert!(
        line("second answer").starts_with(first),
        "the duplicate got another answer:\n{stdout}"
    );
    assert!(line("inbox_log row").starts_with("status done"), "{stdout}");
    assert!(
        line("parked").contains("class system, attempts 3"),
        "{stdout}"
    );
    assert_eq!(line("pending"), "1 letter(s) in dead_letters");

    // What the database holds, read apart from the example.
    let client = schema.client().await;
    let count = |sql: &'static str| {
        let client = &client;
        async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(
        count("SELECT count(*) FROM inbox_log WHERE status = 'done'").await,
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL AND attempts = 3").await,
        1
    );
    drop(client);
    schema.drop_all().await;
}

#[test]
fn without_database_url_it_says_what_to_set_and_exits_with_2() {
    let output = example::command("postgres_setup", &[])
        .env_remove("DATABASE_URL")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("DATABASE_URL is not set"), "{stderr}");
    assert!(
        stderr.contains("cargo run --features postgres --example postgres_setup"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
