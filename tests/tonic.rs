//! `Classify` for `tonic::Status` and the `caller-retries` metadata, against a real loopback
//! tonic server (the hand-written service of `examples/tonic_client.rs`), on the real clock.

#[allow(dead_code)]
#[path = "../examples/tonic_client.rs"]
mod example;

use crate::example as run_example;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_core::tonic::{caller_retries, honour_caller_retries, retry_idempotent};
use retry_core::{retryable, scope};
use tokio::time::Instant;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status};

use example::{Client, Unary, call, connect, serve};

/// A call the server got.
#[derive(Debug, Clone, Copy)]
struct Call {
    marked: bool,
    at: Instant,
}

/// The server's side: scripted answers, one per attempt of its own lookup, and what it saw.
#[derive(Default)]
struct Server {
    script: Mutex<VecDeque<Result<String, Status>>>,
    calls: Mutex<Vec<Call>>,
    /// Attempts of the server's own retrying lookup.
    lookups: AtomicU32,
    /// Whether a retry scope was active in the handler, call by call (`CallerRetriesLayer`).
    scoped: Mutex<Vec<bool>>,
}

impl Server {
    fn script(&self, answers: impl IntoIterator<Item = Result<String, Status>>) {
        *self.script.lock().unwrap() = answers.into_iter().collect();
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The next answer; the last one repeats.
    fn next(&self) -> Result<String, Status> {
        let mut script = self.script.lock().unwrap();
        let answer = if script.len() > 1 {
            script.pop_front()
        } else {
            script.front().cloned()
        };
        answer.unwrap_or_else(|| Err(Status::internal("no script")))
    }
}

/// The server's own retrying work, as a handler calling a database would have.
#[retryable(max = 3, base = "1ms")]
async fn look_up(server: &Server) -> Result<String, Status> {
    server.lookups.fetch_add(1, Ordering::SeqCst);
    server.next()
}

async fn handle(server: Arc<Server>, request: Request<String>) -> Result<Response<String>, Status> {
    server.calls.lock().unwrap().push(Call {
        marked: caller_retries(&request),
        at: Instant::now(),
    });
    server.scoped.lock().unwrap().push(scope::is_active());
    let answer = honour_caller_retries(&request, look_up(&server)).await?;
    Ok(Response::new(answer))
}

async fn start() -> (Arc<Server>, Client) {
    let server = Arc::new(Server::default());
    let state = server.clone();
    let url = serve(Unary::new(move |request| handle(state.clone(), request)))
        .await
        .unwrap();
    (server, connect(url).unwrap())
}

/// The client's retrying call: 3 attempts, 5 ms apart and more, on `Status`'s own `Classify`.
#[retryable(max = 3, base = "5ms", jitter = "none")]
async fn get_quote(client: &Client) -> Result<String, Status> {
    call(client, "7").await
}

/// The same for an idempotent method: `DEADLINE_EXCEEDED` is retried too.
#[retryable(max = 3, base = "5ms", jitter = "none", retry_if = retry_idempotent)]
async fn read_quote(client: &Client) -> Result<String, Status> {
    call(client, "7").await
}

fn with_pushback(mut status: Status, millis: &'static str) -> Status {
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", MetadataValue::from_static(millis));
    status
}

#[tokio::test]
async fn unavailable_is_retried_and_every_call_carries_the_marker() {
    let (server, client) = start().await;
    server.script([
        Err(Status::unavailable("restarting")),
        Err(Status::unavailable("restarting")),
        Ok("700".to_owned()),
    ]);
    assert_eq!(get_quote(&client).await.unwrap(), "700");
    let calls = server.calls();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|c| c.marked), "{calls:?}");
    // The caller retries: the server's own lookup made one attempt per call, not three.
    assert_eq!(server.lookups.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn resource_exhausted_waits_at_least_the_pushback() {
    let (server, client) = start().await;
    server.script([
        Err(with_pushback(Status::resource_exhausted("quota"), "300")),
        Ok("700".to_owned()),
    ]);
    assert_eq!(get_quote(&client).await.unwrap(), "700");
    let calls = server.calls();
    assert_eq!(calls.len(), 2);
    let waited = calls[1].at - calls[0].at;
    assert!(waited >= Duration::from_millis(305), "{waited:?}");
    assert!(waited < Duration::from_secs(1), "{waited:?}");
}

#[tokio::test]
async fn a_negative_pushback_means_do_not_retry() {
    let (server, client) = start().await;
    server.script([
        Err(with_pushback(Status::unavailable("draining"), "-1")),
        Ok("700".to_owned()),
    ]);
    let status = get_quote(&client).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.calls().len(), 1);
}

#[tokio::test]
async fn the_callers_mistakes_stop_at_once() {
    let (server, client) = start().await;
    for code in [
        Code::InvalidArgument,
        Code::NotFound,
        Code::PermissionDenied,
        Code::Unauthenticated,
        Code::FailedPrecondition,
        Code::AlreadyExists,
        Code::Aborted,
        Code::Unimplemented,
        Code::Internal,
    ] {
        let before = server.calls().len();
        server.script([Err(Status::new(code, "no")), Ok("700".to_owned())]);
        let status = get_quote(&client).await.unwrap_err();
        assert_eq!(status.code(), code);
        assert_eq!(server.calls().len() - before, 1, "{code:?}");
    }
}

#[tokio::test]
async fn deadline_exceeded_is_retried_only_for_an_idempotent_method() {
    let (server, client) = start().await;
    let late = || Err(Status::deadline_exceeded("took too long"));
    server.script([late(), Ok("700".to_owned())]);
    let status = get_quote(&client).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(server.calls().len(), 1);

    server.script([late(), Ok("700".to_owned())]);
    assert_eq!(read_quote(&client).await.unwrap(), "700");
    assert_eq!(server.calls().len(), 3);
}

#[tokio::test]
async fn a_call_outside_any_retry_is_not_marked_and_the_server_retries_it() {
    let (server, client) = start().await;
    server.script([
        Err(Status::unavailable("restarting")),
        Err(Status::unavailable("restarting")),
        Ok("700".to_owned()),
    ]);
    assert_eq!(call(&client, "7").await.unwrap(), "700");
    let calls = server.calls();
    assert_eq!(calls.len(), 1);
    assert!(!calls[0].marked);
    assert_eq!(
        server.lookups.load(Ordering::SeqCst),
        3,
        "the server's own retries"
    );
    assert_eq!(*server.scoped.lock().unwrap(), [false]);
}

#[tokio::test]
async fn the_tower_layer_on_the_server_scopes_marked_calls() {
    // `serve` puts `CallerRetriesLayer` on the server: a marked call's handler already runs
    // inside a single-attempt scope, before `honour_caller_retries` is asked.
    let (server, client) = start().await;
    server.script([Ok("700".to_owned())]);
    get_quote(&client).await.unwrap();
    assert_eq!(*server.scoped.lock().unwrap(), [true]);
}

#[test]
fn the_example_prints_the_attempts_and_the_marker() {
    let stdout = run_example::stdout_of_success("tonic_client", &[]);
    assert!(
        stdout.contains("-> quote 7: 700 cents after 4 attempts"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ResourceExhausted \"10 calls per second\", next in"),
        "{stdout}"
    );
    assert!(
        stdout.contains("InvalidArgument \"the quote id must be a number\" after 1 attempt"),
        "{stdout}"
    );
    assert!(
        stdout.contains("server: 5 calls, 5 of them carried caller-retries: ?1"),
        "{stdout}"
    );
}
