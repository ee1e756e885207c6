//! Why a connection could not be made, read from an error's source chain (hyper-util's
//! connector, under reqwest or used directly).

/// Why a connection could not be made, read from an HTTP client error's source chain (reqwest's,
/// hyper-util's, or one that wraps them): the two
/// failures that no resend fixes, and everything else (refused, reset, unreachable, a DNS server
/// that did not answer), which may work next time.
///
/// Neither reqwest nor hyper-util exposes these as kinds, and the errors underneath depend on the
/// resolver and the TLS stack the application picked (reqwest's features, the connector given
/// to hyper-util), so the chain is read as text:
///
/// - **No such host**: hyper-util's connector wraps every resolution failure in an error whose
///   message is exactly `"dns error"`; below it, the resolver says why. A name that does not
///   exist reads "Name or service not known" / "No address associated with hostname" (glibc
///   `EAI_NONAME` / `EAI_NODATA`), "nodename nor servname provided, or not known" (macOS),
///   "Name does not resolve" (musl), "No such host is known" (Windows `WSAHOST_NOT_FOUND`) or
///   "no record found" (hickory-dns). A temporary failure ("Temporary failure in name
///   resolution", `EAI_AGAIN`) matches none of these and stays transient.
/// - **Certificate rejected**: rustls reports "invalid peer certificate: .." (its
///   `Error::InvalidCertificate`, also what rustls-platform-verifier returns), OpenSSL through
///   native-tls "certificate verify failed", Security.framework and SChannel "not trusted".
///
/// glibc's and OpenSSL's answers are also checked against real failures (the workspace's
/// `tests/reqwest_connect.rs`: a loopback TLS server with a self-signed certificate, and
/// `no-such-host.invalid`); the others only on constructed chains of the text those stacks give.
///
/// ```
/// use retry_core::http::ConnectFailure;
/// use std::io;
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert_eq!(ConnectFailure::of(&refused), ConnectFailure::Other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// The host name does not exist (the resolver answered: no such name).
    NoSuchHost,
    /// The server's TLS certificate failed verification.
    CertificateRejected,
    /// Anything else: refused, reset, unreachable, timed out, a resolver that did not answer.
    Other,
}

/// What resolvers say when a name does not exist (see [`ConnectFailure`]).
const NO_SUCH_NAME: &[&str] = &[
    "name or service not known",
    "no address associated with hostname",
    "nodename nor servname provided",
    "name does not resolve",
    "no such host is known",
    "no record found",
    "no records found",
];

/// What TLS stacks say when the peer's certificate fails verification.
const CERTIFICATE_REJECTED: &[&str] = &[
    "invalid peer certificate",
    "certificate verify failed",
    "not trusted",
];

impl ConnectFailure {
    /// Reads `error` and its sources (see the type's documentation for what is matched).
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut resolving = false;
        let mut next = Some(error);
        while let Some(error) = next {
            let text = error.to_string();
            // hyper-util's `ConnectError::new("dns error", cause)`: only what is below it is
            // the resolver's answer.
            resolving |= text == "dns error";
            let text = text.to_ascii_lowercase();
            if resolving && NO_SUCH_NAME.iter().any(|known| text.contains(known)) {
                return ConnectFailure::NoSuchHost;
            }
            if CERTIFICATE_REJECTED
                .iter()
                .any(|known| text.contains(known))
            {
                return ConnectFailure::CertificateRejected;
            }
            next = error.source();
        }
        ConnectFailure::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    /// A chain as hyper-util's connector builds it: a message over a cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn std::error::Error + Send + Sync>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.1)
        }
    }

    fn dns(cause: &str) -> Wrapped {
        Wrapped("dns error", std::io::Error::other(cause.to_owned()).into())
    }

    #[test]
    fn a_name_that_does_not_exist_is_told_from_a_resolver_that_did_not_answer() {
        for missing in [
            "failed to lookup address information: Name or service not known",
            "failed to lookup address information: No address associated with hostname",
            "failed to lookup address information: nodename nor servname provided, or not known",
            "failed to lookup address information: Name does not resolve",
            "No such host is known. (os error 11001)",
            "no record found for Query { name: Name(\"x.invalid.\") }",
        ] {
            assert_eq!(
                ConnectFailure::of(&Wrapped("client error (Connect)", dns(missing).into())),
                ConnectFailure::NoSuchHost,
                "{missing}"
            );
        }
        let again =
            dns("failed to lookup address information: Temporary failure in name resolution");
        assert_eq!(ConnectFailure::of(&again), ConnectFailure::Other);
        // The same words outside a resolution failure are not a DNS answer.
        let elsewhere = std::io::Error::other("Name or service not known");
        assert_eq!(ConnectFailure::of(&elsewhere), ConnectFailure::Other);
    }

    #[test]
    fn a_certificate_that_fails_verification_is_told_from_other_tls_failures() {
        for rejected in [
            // rustls `Error::InvalidCertificate(CertificateError::UnknownIssuer)`.
            "invalid peer certificate: UnknownIssuer",
            // OpenSSL 3.0 through native-tls: what tests/reqwest_connect.rs gets from its
            // loopback server, word for word.
            "error:0A000086:SSL routines:tls_post_process_server_certificate:certificate verify failed:../ssl/statem/statem_clnt.c:1889: (self-signed certificate)",
            // SChannel.
            "The certificate chain was issued by an authority that is not trusted.",
        ] {
            let chain = Wrapped(
                "client error (Connect)",
                std::io::Error::new(std::io::ErrorKind::InvalidData, rejected).into(),
            );
            assert_eq!(
                ConnectFailure::of(&chain),
                ConnectFailure::CertificateRejected,
                "{rejected}"
            );
        }
        let reset = Wrapped(
            "client error (Connect)",
            std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
        );
        assert_eq!(ConnectFailure::of(&reset), ConnectFailure::Other);
    }
}
