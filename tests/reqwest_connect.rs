//! The two connection failures no resend fixes, made for real and sent through `#[retryable]`:
//! a TLS certificate the client does not trust (a loopback server presenting the self-signed
//! certificate in `fixtures/tls/`, over native-tls and the system OpenSSL) and a host name that
//! does not exist (the system resolver). Beside each, the same client against what it can reach
//! (a 200 once it trusts the certificate; `localhost`) and against a server that closes every
//! connection, which is retried. Real sockets, so the real clock with millisecond backoff.

use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use retry_core::reqwest::{ConnectFailure, HttpError, RequestBuilderExt, client_builder};
use retry_core::{Classify, Decision, retryable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Self-signed, for `localhost` and 127.0.0.1 (see `fixtures/tls/README.md`).
const CERT: &[u8] = include_bytes!("fixtures/tls/cert.pem");
const KEY: &[u8] = include_bytes!("fixtures/tls/key.pem");

/// A server on 127.0.0.1 that counts the TCP connections it accepts.
struct Server {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    /// Presents the fixture certificate and answers every request `200` with the body `ok`.
    async fn tls() -> Server {
        let identity = native_tls::Identity::from_pkcs8(CERT, KEY).unwrap();
        let acceptor = tokio_native_tls::TlsAcceptor::from(
            native_tls::TlsAcceptor::builder(identity).build().unwrap(),
        );
        Server::start(move |tcp| {
            let acceptor = acceptor.clone();
            async move {
                // A client that rejects the certificate ends the handshake here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                // The request head (a GET has no body), then the answer.
                let mut head = Vec::new();
                let mut buf = [0; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        })
        .await
    }

    /// Accepts every connection and closes it at once, before any TLS.
    async fn closing() -> Server {
        Server::start(|tcp| async move { drop(tcp) }).await
    }

    async fn start<H, F>(handle: H) -> Server
    where
        H: Fn(tokio::net::TcpStream) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                // Counted before the handshake, so before the client can see any answer.
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(handle(tcp));
            }
        });
        Server { port, accepted }
    }

    /// By name, so the certificate's name matches and only the trust in it is in question.
    fn url(&self) -> String {
        format!("https://localhost:{}/", self.port)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// A client with the platform's trust roots, as an application has: the fixture is not among them.
fn client() -> reqwest::Client {
    client_builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A client that trusts the fixture certificate (and nothing else).
fn trusting_client() -> reqwest::Client {
    client_builder()
        .tls_certs_only([reqwest::Certificate::from_pem(CERT).unwrap()])
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[retryable(max = 4, base = "1ms", cap = "5ms")]
async fn fetch(
    client: &reqwest::Client,
    url: &str,
    attempts: &AtomicUsize,
) -> Result<String, HttpError> {
    attempts.fetch_add(1, Ordering::SeqCst);
    Ok(client
        .get(url)
        .send_checked()
        .await?
        .text()
        .await
        .unwrap_or_default())
}

/// The error and its sources, one per line, for the failure messages.
fn chain(error: &(dyn Error + 'static)) -> String {
    let mut lines = vec![error.to_string()];
    let mut next = error.source();
    while let Some(source) = next {
        lines.push(source.to_string());
        next = source.source();
    }
    lines.join("\n  caused by: ")
}

#[tokio::test]
async fn a_certificate_the_client_does_not_trust_is_not_retried() {
    let server = Server::tls().await;
    let attempts = AtomicUsize::new(0);
    let error = fetch(&client(), &server.url(), &attempts)
        .await
        .unwrap_err();
    let text = chain(&error);
    assert_eq!(server.accepted(), 1, "connections accepted; {text}");
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "{text}");
    let transport = error.transport().expect(&text);
    assert!(transport.is_connect(), "{text}");
    assert_eq!(
        ConnectFailure::of(transport),
        ConnectFailure::CertificateRejected,
        "{text}"
    );
    assert_eq!(error.classify(), Decision::Stop, "{text}");
    assert_eq!(error.reason().as_deref(), Some("TLS certificate rejected"));
    assert_eq!(transport.classify(), Decision::Stop, "{text}");
    // Rejected for who signed it, not for its name: the name matched.
    let lower = text.to_ascii_lowercase();
    assert!(
        lower.contains("self-signed") || lower.contains("self signed"),
        "not the self-signed rejection: {text}"
    );
}

#[tokio::test]
async fn the_same_server_answers_a_client_that_trusts_its_certificate() {
    let server = Server::tls().await;
    let attempts = AtomicUsize::new(0);
    let body = fetch(&trusting_client(), &server.url(), &attempts)
        .await
        .unwrap_or_else(|e| panic!("{}", chain(&e)));
    assert_eq!(body, "ok");
    assert_eq!(server.accepted(), 1);
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_server_that_closes_the_connection_during_the_handshake_is_retried_to_max() {
    let server = Server::closing().await;
    let attempts = AtomicUsize::new(0);
    let error = fetch(&trusting_client(), &server.url(), &attempts)
        .await
        .unwrap_err();
    let text = chain(&error);
    assert_eq!(server.accepted(), 4, "connections accepted; {text}");
    assert_eq!(attempts.load(Ordering::SeqCst), 4, "{text}");
    let transport = error.transport().expect(&text);
    assert!(transport.is_connect(), "{text}");
    assert_eq!(
        ConnectFailure::of(transport),
        ConnectFailure::Other,
        "{text}"
    );
    assert_eq!(error.classify(), Decision::Retry, "{text}");
    assert_eq!(error.reason().as_deref(), Some("connect error"));
}

#[tokio::test]
async fn a_host_name_that_does_not_exist_is_not_retried() {
    // A name that exists reaches the server through the same resolver and client.
    let server = Server::tls().await;
    let reached = AtomicUsize::new(0);
    let body = fetch(&trusting_client(), &server.url(), &reached)
        .await
        .unwrap_or_else(|e| panic!("localhost: {}", chain(&e)));
    assert_eq!((body.as_str(), server.accepted()), ("ok", 1));

    // RFC 2606 reserves `.invalid`: a resolver answers "no such name" without asking anyone.
    let attempts = AtomicUsize::new(0);
    let error = fetch(
        &trusting_client(),
        "https://no-such-host.invalid/",
        &attempts,
    )
    .await
    .unwrap_err();
    let text = chain(&error);
    let transport = error.transport().expect(&text);
    // `EAI_AGAIN` (glibc and macOS; "Try again" on musl): no answer, which is rightly retried,
    // so the test cannot tell anything here. A failure, never a pass.
    let lower = text.to_ascii_lowercase();
    assert!(
        !lower.contains("temporary failure in name resolution") && !lower.contains("try again"),
        "this machine's resolver could not be reached: it must answer that no-such-host.invalid \
         does not exist (`getent hosts no-such-host.invalid` prints nothing and exits 2 at once), \
         but it said it could not answer; fix the resolver (/etc/resolv.conf) to run this test:\n  \
         {text}"
    );
    assert_eq!(
        ConnectFailure::of(transport),
        ConnectFailure::NoSuchHost,
        "{text}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1, "{text}");
    assert!(transport.is_connect(), "{text}");
    assert_eq!(error.classify(), Decision::Stop, "{text}");
    assert_eq!(error.reason().as_deref(), Some("no such host"));
}
