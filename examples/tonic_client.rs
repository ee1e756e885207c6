//! A gRPC client whose calls retry on `tonic::Status`, against a flaky loopback tonic server.
//!
//! `get_quote` is a `#[retryable]` function returning `Result<String, tonic::Status>`: with
//! feature `tonic`, `Status` classifies itself (`UNAVAILABLE` and `RESOURCE_EXHAUSTED` are
//! retried, the server's `grpc-retry-pushback-ms` is the floor of the next wait,
//! `INVALID_ARGUMENT` and the other caller's mistakes stop at once), and the
//! `mark_caller_retries` interceptor tells the server that its caller retries, so the server
//! runs its own retries as single attempts.
//!
//! The service is written by hand over tonic's low-level `server::Grpc` and `client::Grpc`
//! with a codec of UTF-8 strings: no `.proto`, no protoc, no build script.
//!
//! Run it with `cargo run --example tonic_client`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut};
use http::uri::PathAndQuery;
use retry_core::retryable;
use retry_core::tonic::{caller_retries, mark_caller_retries};
use retry_core::tower::CallerRetriesLayer;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataValue;
use tonic::server::UnaryService;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};

/// Messages are UTF-8 strings, as they are: a codec fit for an example, and no protobuf.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringCodec;

impl Codec for StringCodec {
    type Encode = String;
    type Decode = String;
    type Encoder = StringCodec;
    type Decoder = StringCodec;

    fn encoder(&mut self) -> StringCodec {
        StringCodec
    }

    fn decoder(&mut self) -> StringCodec {
        StringCodec
    }
}

impl Encoder for StringCodec {
    type Item = String;
    type Error = Status;

    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for StringCodec {
    type Item = String;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("not UTF-8: {e}")))
    }
}

/// The one method of the example's service.
pub const GET_QUOTE: &str = "/quotes.Quotes/Get";

/// A unary gRPC service that answers every call with `handler`.
#[derive(Clone)]
pub struct Unary<H> {
    handler: H,
}

impl<H> Unary<H> {
    pub fn new(handler: H) -> Self {
        Unary { handler }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<H, F> tower_service::Service<http::Request<Body>> for Unary<H>
where
    H: Fn(Request<String>) -> F + Clone + Send + 'static,
    F: Future<Output = Result<Response<String>, Status>> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let handler = Handler(self.handler.clone());
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(StringCodec);
            Ok(grpc.unary(handler, request).await)
        })
    }
}

struct Handler<H>(H);

impl<H, F> UnaryService<String> for Handler<H>
where
    H: Fn(Request<String>) -> F,
    F: Future<Output = Result<Response<String>, Status>>,
{
    type Response = String;
    type Future = F;

    fn call(&mut self, request: Request<String>) -> F {
        (self.0)(request)
    }
}

/// Serves `service` on a free loopback port behind `CallerRetriesLayer` (a handler whose call
/// carries `caller-retries: ?1` runs its own retries as single attempts); returns its URL.
pub async fn serve<H, F>(service: Unary<H>) -> Result<String, Box<dyn std::error::Error>>
where
    H: Fn(Request<String>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<String>, Status>> + Send + 'static,
{
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse()?)?;
    let url = format!("http://{}", incoming.local_addr()?);
    let server = Server::builder()
        .layer(CallerRetriesLayer)
        .serve_with_incoming(service, incoming);
    tokio::spawn(server);
    Ok(url)
}

/// The interceptor's type, named so the client's type can be.
pub type Mark = fn(Request<()>) -> Result<Request<()>, Status>;

/// A client of the service at `url` whose calls say, inside a retry, that their caller
/// retries them.
pub type Client = tonic::client::Grpc<InterceptedService<Channel, Mark>>;

pub fn connect(url: String) -> Result<Client, Box<dyn std::error::Error>> {
    let channel = Endpoint::from_shared(url)?.connect_lazy();
    Ok(tonic::client::Grpc::new(InterceptedService::new(
        channel,
        mark_caller_retries as Mark,
    )))
}

/// One call of `GET_QUOTE`.
pub async fn call(client: &Client, id: &str) -> Result<String, Status> {
    let mut client = client.clone();
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let response = client
        .unary(
            Request::new(id.to_owned()),
            PathAndQuery::from_static(GET_QUOTE),
            StringCodec,
        )
        .await?;
    Ok(response.into_inner())
}

/// Prints each failed attempt and the wait before the next.
fn log_retry(attempt: u32, status: &Status, wait: Duration) {
    println!(
        "  attempt {attempt}: {:?} \"{}\", next in {} ms",
        status.code(),
        status.message(),
        wait.as_millis()
    );
}

/// The client's call, retried on `tonic::Status`'s own classification.
#[retryable(max = 5, base = "20ms", cap = "200ms", on_retry = log_retry)]
async fn get_quote(client: &Client, id: &str) -> Result<String, Status> {
    call(client, id).await
}

/// What the server saw: calls, and how many carried `caller-retries: ?1`.
#[derive(Default)]
struct Seen {
    calls: AtomicU32,
    marked: AtomicU32,
}

/// The server: busy for a while, then rate-limited with a pushback, then it answers; an id
/// that is not a number is the caller's mistake.
async fn quotes(seen: Arc<Seen>, request: Request<String>) -> Result<Response<String>, Status> {
    let call = seen.calls.fetch_add(1, Ordering::SeqCst) + 1;
    if caller_retries(&request) {
        seen.marked.fetch_add(1, Ordering::SeqCst);
    }
    let Ok(id) = request.get_ref().parse::<u64>() else {
        return Err(Status::invalid_argument("the quote id must be a number"));
    };
    match call {
        1 | 2 => Err(Status::unavailable("warming up")),
        3 => {
            let mut busy = Status::new(Code::ResourceExhausted, "10 calls per second");
            busy.metadata_mut()
                .insert("grpc-retry-pushback-ms", MetadataValue::from_static("150"));
            Err(busy)
        }
        _ => Ok(Response::new(format!("quote {id}: {} cents", id * 100))),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seen = Arc::new(Seen::default());
    let state = seen.clone();
    let url = serve(Unary::new(move |request| {
        let seen = state.clone();
        async move { quotes(seen, request).await }
    }))
    .await?;
    let client = connect(url)?;

    println!("get_quote(7): max = 5, base = 20ms, on tonic::Status");
    let started = Instant::now();
    let quote = get_quote(&client, "7").await?;
    let calls = seen.calls.load(Ordering::SeqCst);
    println!(
        "  -> {quote} after {calls} attempts in {} ms",
        started.elapsed().as_millis()
    );

    println!("get_quote(\"seven\"):");
    match get_quote(&client, "seven").await {
        Ok(quote) => println!("  -> unexpected answer {quote}"),
        Err(status) => println!(
            "  -> {:?} \"{}\" after {} attempt (not retried)",
            status.code(),
            status.message(),
            seen.calls.load(Ordering::SeqCst) - calls
        ),
    }
    println!(
        "server: {} calls, {} of them carried caller-retries: ?1",
        seen.calls.load(Ordering::SeqCst),
        seen.marked.load(Ordering::SeqCst)
    );
    Ok(())
}
