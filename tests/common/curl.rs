//! A real `curl` client for the HTTP tests: a POST with `Idempotency-Key`, its answer parsed.
//! Needs `/usr/bin/curl` (or `curl` on `PATH`); without it the tests fail, never pass.
#![allow(dead_code)]

use std::process::Command;

/// What curl got.
#[derive(Debug)]
pub(crate) struct Answer {
    /// curl's exit code: 0, or 28 when `--max-time` ran out.
    pub(crate) exit: i32,
    pub(crate) status: u16,
    /// Header lines, names lower-cased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
    }

    pub(crate) fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("?1")
    }
}

/// The curl to run: `/usr/bin/curl` if it is there, else `curl` on `PATH`.
fn curl_program() -> &'static str {
    if std::path::Path::new("/usr/bin/curl").exists() {
        "/usr/bin/curl"
    } else {
        "curl"
    }
}

/// POSTs `body` to `url` with `Idempotency-Key: "<key>"` through a real curl process, waiting
/// at most `max_time` seconds (curl's `--max-time`) when given.
pub(crate) async fn curl(url: String, key: &str, body: &str, max_time: Option<&str>) -> Answer {
    curl_as(url, key, "application/json", body, max_time).await
}

/// [`curl`] with another `Content-Type`.
pub(crate) async fn curl_as(
    url: String,
    key: &str,
    content_type: &str,
    body: &str,
    max_time: Option<&str>,
) -> Answer {
    let mut command = Command::new(curl_program());
    command
        .args(["--silent", "--show-error", "--include", "--request", "POST"])
        .args(["--header", &format!("Idempotency-Key: \"{key}\"")])
        .args(["--header", &format!("Content-Type: {content_type}")])
        .args(["--data-binary", body]);
    if let Some(seconds) = max_time {
        command.args(["--max-time", seconds]);
    }
    command.arg(&url);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "these tests drive the server with a real curl, which could not be started ({e}); \
                 install curl (e.g. `apt-get install curl`) to run them"
            )
        });
    let exit = output.status.code().unwrap_or(-1);
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        // No response at all (curl gave up first).
        return Answer {
            exit,
            status: 0,
            headers: Vec::new(),
            body: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
    };
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Answer {
        exit,
        status,
        headers,
        body: body.to_owned(),
    }
}
